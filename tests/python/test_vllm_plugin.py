"""msa as a vLLM plugin, tested with the real vLLM package on the CPU.

The plugin loads through its entry point and vLLM's model registry; the selectors' and impl
classes' signatures are what the plugin was written against (a drift fails here, naming it);
vLLM's real MiniMaxM3SparseAttention layer and real metadata builders run decode, chunked
prefill, mixed and speculative steps on bf16 and fp8 caches through msa's impls, against
msa.reference; where msa does not apply, the selectors return vLLM's own impls.

msa's kernels run on CUDA sm_90 in production; here the platform check is replaced so that the
selectors choose msa on the CPU, where the msa ops run on the CPU backend. Skipped without vLLM
(`pip install "./python[vllm]"`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; the msa Python tests need it")
msa = pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")
vllm = pytest.importorskip("vllm", reason="vLLM is not installed: pip install './python[vllm]'")

import _vllm_harness as harness  # noqa: E402
import msa.vllm_plugin as plugin  # noqa: E402
from _msa_testlib import assert_close, assert_topk_valid  # noqa: E402
from _vllm_harness import D, HKV, HQ, TOPK  # noqa: E402
from msa import reference as ref  # noqa: E402
from vllm.config import set_current_vllm_config  # noqa: E402


# ---- plugin loading ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registered() -> None:
    """vLLM's own plugin loader, as in every vLLM process."""
    from vllm.plugins import load_general_plugins

    load_general_plugins()


def test_entry_point_declared() -> None:
    points = importlib.metadata.entry_points(group="vllm.general_plugins")
    assert [p.value for p in points if p.name == "msa"] == ["msa.vllm_plugin:register"]


def test_registry_points_to_msa(registered: None) -> None:
    from vllm import ModelRegistry
    from vllm.models.minimax_m3.common import sparse_attention as vllm_sparse

    for arch in plugin.ARCHITECTURES:
        model = ModelRegistry.models[arch]
        assert (model.module_name, model.class_name) == (plugin.MODELS_MODULE, arch)
    # Resolving an architecture imports msa.vllm_plugin.models, which wraps the selectors and
    # hands vLLM its own model class.
    model_config = harness.vllm_config("auto", "bf16", 0).model_config
    cls, arch = ModelRegistry.resolve_model_cls(["MiniMaxM3SparseForCausalLM"], model_config)
    from vllm.models.minimax_m3 import MiniMaxM3SparseForCausalLM

    assert cls is MiniMaxM3SparseForCausalLM
    assert vllm_sparse.select_main_backend_and_impl_cls.__wrapped__ is not None


def test_register_is_idempotent(registered: None) -> None:
    from vllm import ModelRegistry

    before = {a: ModelRegistry.models[a] for a in plugin.ARCHITECTURES}
    plugin.register()
    plugin.register()
    assert {a: ModelRegistry.models[a] for a in plugin.ARCHITECTURES} == before


@contextlib.contextmanager
def captured_log():
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    level = plugin.logger.level
    plugin.logger.setLevel(logging.INFO)
    plugin.logger.addHandler(handler)
    try:
        yield records
    finally:
        plugin.logger.removeHandler(handler)
        plugin.logger.setLevel(level)


@pytest.mark.parametrize("case", ["old_vllm", "new_vllm", "kill_switch"])
def test_register_leaves_vllm_untouched(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm import ModelRegistry

    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(ModelRegistry, "models", dict(ModelRegistry.models))
    monkeypatch.setitem(ModelRegistry.models, "MiniMaxM3MTP", "vLLM's own")
    if case == "kill_switch":
        monkeypatch.setenv(plugin.DISABLE_ENV, "1")
    else:
        monkeypatch.setattr(vllm, "__version__", "0.32.1" if case == "old_vllm" else "0.34.0")
    with captured_log() as records:
        plugin.register()
        plugin.register()
    assert ModelRegistry.models["MiniMaxM3MTP"] == "vLLM's own"
    assert len(records) == 1, [r.getMessage() for r in records]
    expected = plugin.DISABLE_ENV if case == "kill_switch" else "outside the supported range"
    assert expected in records[0].getMessage()


def test_supported_range_matches_the_extra() -> None:
    requires = importlib.metadata.requires("msa-attention") or []
    extra = [r for r in requires if r.startswith("vllm") and 'extra == "vllm"' in r]
    assert extra, requires
    first, end = plugin.SUPPORTED_VLLM
    assert f">={first}" in extra[0] and f"<{end.rsplit('.', 1)[0]}" in extra[0]
    assert plugin._version_supported(vllm.__version__), vllm.__version__


# ---- signatures ----------------------------------------------------------------------------


def test_vllm_signatures_have_not_drifted() -> None:
    from msa.vllm_plugin import impl

    assert impl.signature_drift() == []


def test_drift_is_detected_and_leaves_vllm_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    from msa.vllm_plugin import impl

    def select_indexer_impl_cls(*, topk_blocks: int, indexer_kv_dtype: str,
                                index_score: str) -> type:
        raise AssertionError("not called")

    monkeypatch.setattr(impl.vllm_indexer, "select_indexer_impl_cls", select_indexer_impl_cls)
    drift = impl.signature_drift()
    assert len(drift) == 1 and drift[0].startswith("select_indexer_impl_cls"), drift


# ---- the real layer and metadata builders --------------------------------------------------


@pytest.fixture(scope="module")
def distributed() -> None:
    harness.init_distributed()


@pytest.fixture
def msa_platform(monkeypatch: pytest.MonkeyPatch, registered: None) -> None:
    """Lets the selectors choose msa on this CPU (in production: CUDA sm_90 and a CUDA build)."""
    from msa.vllm_plugin import impl

    monkeypatch.setattr(impl, "_platform_reason", lambda: None)


@pytest.mark.parametrize("cache", ["bf16", "fp8"])
@pytest.mark.parametrize("step", sorted(harness.STEPS))
def test_layer_step_against_reference(step: str, cache: str, distributed: None,
                                      msa_platform: None) -> None:
    from msa.vllm_plugin.impl import MsaIndexerImpl, MsaSparseImpl

    s = harness.run_step(step, cache)
    assert isinstance(s.layer.impl, MsaSparseImpl)
    assert isinstance(s.layer.indexer.impl, MsaIndexerImpl)
    spec = harness.STEPS[step][2]
    num_decodes = sum(1 for n in s.query_lens if n == 1 + spec)
    assert s.main_md.num_decodes == s.index_md.num_decodes == num_decodes
    if spec:
        assert s.main_md.decode.decode_query_len == 1 + spec

    tokens = sum(s.query_lens)
    rows = [ref.Row(b, p) for b, (n, length) in enumerate(zip(s.query_lens, s.seq_lens))
            for p in range(length - n, length)]
    lens = torch.tensor(s.seq_lens, dtype=torch.int32)
    iq = s.index_q.view(tokens, HKV, D)
    want_topk = ref.index_topk(iq, s.index_cache, s.index_table, lens, rows, topk=TOPK,
                               init_blocks=0, local_blocks=1)
    scores = ref.block_scores(iq, s.index_cache, s.index_table, lens, rows)
    assert_topk_valid(s.topk, want_topk, scores, TOPK)

    scales = dict(k_scale=s.k_scale, v_scale=s.v_scale) if s.fp8 else {}
    want_out, _ = ref.attention(s.q.view(tokens, HQ, D), s.kv, s.table, lens, rows,
                                topk=s.topk, softmax_scale=D ** -0.5, **scales)
    assert_close(s.output.view(tokens, HQ, D).float(), want_out, atol=2e-2, rtol=2e-2,
                 what=f"{step} {cache} out")


# ---- where msa does not apply: vLLM's own impls --------------------------------------------


def test_selectors_delegate_off_hopper(distributed: None, registered: None) -> None:
    """On this CPU (not CUDA sm_90) vLLM's own impls are chosen, whatever the dtype."""
    from vllm.models.minimax_m3.common import indexer as vllm_indexer
    from vllm.models.minimax_m3.common import sparse_attention as vllm_sparse

    with set_current_vllm_config(harness.vllm_config("auto", "bf16", 0)):
        assert vllm_sparse.select_main_backend_and_impl_cls(
            topk_blocks=TOPK, kv_cache_dtype="auto", num_kv_heads=HKV
        ) == (vllm_sparse.MiniMaxM3SparseBackend, vllm_sparse.MiniMaxM3SparseTritonImpl)
        assert vllm_indexer.select_indexer_impl_cls(
            topk_blocks=TOPK, indexer_kv_dtype="bf16") is vllm_indexer.MiniMaxM3IndexerTritonImpl


@pytest.mark.parametrize("main_dtype,topk,index_dtype,uses_msa", [
    ("auto", 16, "bf16", True),
    ("fp8", 16, "fp8", True),
    ("fp8_e5m2", 16, "bf16", False),  # an unsupported main cache dtype
    ("auto", 32, "bf16", False),      # top-k beyond msa's 16
])
def test_selectors_choose_msa_only_where_it_applies(
        main_dtype: str, topk: int, index_dtype: str, uses_msa: bool, distributed: None,
        msa_platform: None) -> None:
    from msa.vllm_plugin.impl import MsaIndexerImpl, MsaSparseImpl
    from vllm.models.minimax_m3.common import indexer as vllm_indexer
    from vllm.models.minimax_m3.common import sparse_attention as vllm_sparse

    with set_current_vllm_config(harness.vllm_config(main_dtype, index_dtype, 0)):
        _, main = vllm_sparse.select_main_backend_and_impl_cls(
            topk_blocks=topk, kv_cache_dtype=main_dtype, num_kv_heads=HKV)
        assert (main is MsaSparseImpl) == uses_msa
        if not uses_msa:
            assert main is vllm_sparse.MiniMaxM3SparseTritonImpl
        indexer = vllm_indexer.select_indexer_impl_cls(topk_blocks=topk,
                                                       indexer_kv_dtype=index_dtype)
        assert (indexer is MsaIndexerImpl) == (topk <= 16)


def test_speculative_rows_beyond_eight_delegate(distributed: None, msa_platform: None) -> None:
    from vllm.models.minimax_m3.common import sparse_attention as vllm_sparse

    with set_current_vllm_config(harness.vllm_config("auto", "bf16", 8)):
        _, main = vllm_sparse.select_main_backend_and_impl_cls(
            topk_blocks=TOPK, kv_cache_dtype="auto", num_kv_heads=HKV)
    assert main is vllm_sparse.MiniMaxM3SparseTritonImpl
