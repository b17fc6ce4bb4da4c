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
import math
import tempfile

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; the msa Python tests need it")
msa = pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")
vllm = pytest.importorskip("vllm", reason="vLLM is not installed: pip install './python[vllm]'")

import msa.vllm_plugin as plugin  # noqa: E402
from _msa_testlib import assert_close, assert_topk_valid, generator, randn  # noqa: E402
from msa import reference as ref  # noqa: E402
from vllm.config import (  # noqa: E402
    AttentionConfig, CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig,
    SpeculativeConfig,
    VllmConfig, set_current_vllm_config)
from vllm.forward_context import set_forward_context  # noqa: E402
from vllm.transformers_utils.configs.minimax_m3 import (  # noqa: E402
    MiniMaxM3Config, MiniMaxM3TextConfig)
from vllm.v1.attention.backend import CommonAttentionMetadata  # noqa: E402

BLOCK, HQ, HKV, D, TOPK = 128, 16, 1, 128, 16  # one MiniMax-M3 rank at TP4
MAX_TOKENS, MAX_SEQS, MAX_LEN, NUM_PAGES = 512, 8, 4096, 96


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
    model_config = vllm_config("auto", "bf16", 0).model_config
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


def vllm_config(cache_dtype: str, indexer_kv_dtype: str, spec_tokens: int) -> VllmConfig:
    sparse = {
        "use_sparse_attention": True, "sparse_index_dim": D, "sparse_num_index_heads": HKV,
        "sparse_topk_blocks": TOPK, "sparse_block_size": BLOCK, "sparse_score_type": "max",
        "sparse_init_block": 0, "sparse_local_block": 1,
        "sparse_disable_index_value": [1] * 4, "sparse_attention_freq": [1] * 4,
    }
    text = MiniMaxM3TextConfig(
        vocab_size=256, hidden_size=256, num_hidden_layers=4, num_attention_heads=HQ,
        num_key_value_heads=HKV, head_dim=D, max_position_embeddings=MAX_LEN,
        num_local_experts=4, sparse_attention_config=sparse)
    directory = tempfile.mkdtemp(prefix="msa-vllm-")
    MiniMaxM3Config(text_config=text.to_dict(),
                    architectures=["MiniMaxM3SparseForConditionalGeneration"]
                    ).save_pretrained(directory)
    model = ModelConfig(model=directory, skip_tokenizer_init=True, dtype="bfloat16",
                        max_model_len=MAX_LEN)
    speculative = None
    if spec_tokens:
        speculative = SpeculativeConfig(method="ngram", num_speculative_tokens=spec_tokens,
                                        prompt_lookup_max=3, prompt_lookup_min=1,
                                        target_model_config=model,
                                        target_parallel_config=ParallelConfig())
    return VllmConfig(
        model_config=model,
        cache_config=CacheConfig(block_size=BLOCK, cache_dtype=cache_dtype),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=MAX_TOKENS,
                                         max_num_seqs=MAX_SEQS, max_model_len=MAX_LEN,
                                         is_encoder_decoder=False),
        attention_config=AttentionConfig(indexer_kv_dtype=indexer_kv_dtype),
        speculative_config=speculative,
        device_config=DeviceConfig("cpu"),
    )


@pytest.fixture(scope="module")
def distributed() -> None:
    """vLLM's tensor-parallel group of one rank (gloo), which the layer's linears need."""
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with set_current_vllm_config(vllm_config("auto", "bf16", 0)):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"file://{tempfile.mktemp(prefix='msa-vllm-dist-')}")
        initialize_model_parallel(1, 1)


@pytest.fixture
def msa_platform(monkeypatch: pytest.MonkeyPatch, registered: None) -> None:
    """Lets the selectors choose msa on this CPU (in production: CUDA sm_90 and a CUDA build)."""
    from msa.vllm_plugin import impl

    monkeypatch.setattr(impl, "_platform_reason", lambda: None)


_layer_count = 0


def build_layer(config: VllmConfig):
    """vLLM's MiniMaxM3SparseAttention layer (selectors run in its constructor)."""
    global _layer_count
    from vllm.models.minimax_m3.nvidia.model import MiniMaxM3SparseAttention

    _layer_count += 1
    text = config.model_config.hf_config.text_config
    topk_buffer = torch.full(((MAX_TOKENS + 3) // 4 * 4, HKV, TOPK), -1, dtype=torch.int32)
    return MiniMaxM3SparseAttention(text, 3, None, prefix=f"model.layers.{_layer_count}.attn",
                                    cache_config=config.cache_config,
                                    topk_indices_buffer=topk_buffer)


def common_metadata(query_lens: list[int], seq_lens: list[int],
                    block_table: torch.Tensor) -> CommonAttentionMetadata:
    """vLLM's per-step input of the metadata builders, decode requests first."""
    i32 = torch.int32
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    slots = []
    for b, (n, s) in enumerate(zip(query_lens, seq_lens)):
        for p in range(s - n, s):
            slots.append(int(block_table[b, p // BLOCK]) * BLOCK + p % BLOCK)
    qsl = torch.tensor(starts, dtype=i32)
    lens = torch.tensor(seq_lens, dtype=i32)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=lens,
        num_reqs=len(query_lens), num_actual_tokens=starts[-1], max_query_len=max(query_lens),
        max_seq_len=max(seq_lens), block_table_tensor=block_table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64), seq_lens_cpu_upper_bound=lens)


def pages(seq_lens: list[int], gen: torch.Generator) -> torch.Tensor:
    """[B, max_blocks] int32 block table of distinct, shuffled pages."""
    per = [math.ceil(s / BLOCK) for s in seq_lens]
    perm = torch.randperm(NUM_PAGES, generator=gen).tolist()
    table = torch.zeros(len(seq_lens), max(per), dtype=torch.int32)
    used = 0
    for b, n in enumerate(per):
        table[b, :n] = torch.tensor(perm[used:used + n], dtype=torch.int32)
        used += n
    return table


STEPS = {
    # name: (query_lens, seq_lens, speculative tokens), decode requests first.
    "decode": ([1, 1, 1], [2300, 129, 1800], 0),
    "chunked_prefill": ([200], [1900], 0),
    "mixed": ([1, 1, 300], [2400, 3000, 2600], 0),
    "speculative": ([3, 3, 3, 150], [2100, 700, 2980, 150], 2),
}


@pytest.mark.parametrize("cache", ["bf16", "fp8"])
@pytest.mark.parametrize("step", sorted(STEPS))
def test_layer_step_against_reference(step: str, cache: str, distributed: None,
                                      msa_platform: None) -> None:
    from msa.vllm_plugin.impl import MsaIndexerImpl, MsaSparseImpl

    query_lens, seq_lens, spec = STEPS[step]
    fp8 = cache == "fp8"
    config = vllm_config("fp8" if fp8 else "auto", "fp8" if fp8 else "bf16", spec)
    gen = generator(len(step) + 10 * fp8)
    with set_current_vllm_config(config):
        layer = build_layer(config)
        assert isinstance(layer.impl, MsaSparseImpl)
        assert isinstance(layer.indexer.impl, MsaIndexerImpl)
        index_cache_layer = layer.indexer.index_cache

        # Caches as vLLM binds them: the main cache packed [pages, Hkv, 128, 2 D] (uint8 bytes
        # of e4m3 when fp8), the index cache [pages, 128, Di].
        kv_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
        kv = randn(NUM_PAGES, HKV, BLOCK, 2 * D, gen=gen, dtype=kv_dtype)
        layer.kv_cache = kv.view(torch.uint8) if fp8 else kv
        index_cache = randn(NUM_PAGES, BLOCK, D, gen=gen, dtype=index_cache_layer.dtype)
        index_cache_layer.kv_cache = index_cache
        if fp8:
            layer._k_scale.fill_(0.5)
            layer._v_scale.fill_(0.25)

        table, index_table = pages(seq_lens, gen), pages(seq_lens, gen)
        main_common = common_metadata(query_lens, seq_lens, table)
        index_common = common_metadata(query_lens, seq_lens, index_table)
        device = torch.device("cpu")
        main_builder = layer.attn_backend.get_builder_cls()(
            layer.get_kv_cache_spec(config), [layer.layer_name], config, device)
        index_builder = index_cache_layer.get_attn_backend().get_builder_cls()(
            index_cache_layer.get_kv_cache_spec(config), [index_cache_layer.prefix], config,
            device)
        main_md = main_builder.build(0, main_common)
        index_md = index_builder.build(0, index_common)
        num_decodes = sum(1 for n in query_lens if n == 1 + spec) if spec else \
            sum(1 for n in query_lens if n == 1)
        assert main_md.num_decodes == index_md.num_decodes == num_decodes

        tokens = sum(query_lens)
        q = randn(tokens, HQ * D, gen=gen)
        index_q = randn(tokens, HKV * D, gen=gen, dtype=index_cache_layer.dtype)
        output = torch.zeros(tokens, HQ * D, dtype=torch.bfloat16)
        metadata = {layer.layer_name: main_md, index_cache_layer.prefix: index_md}
        with set_forward_context(metadata, config):
            layer._run_attention(q, None, index_q, output)

    rows = [ref.Row(b, p) for b, (n, s) in enumerate(zip(query_lens, seq_lens))
            for p in range(s - n, s)]
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    iq = index_q.view(tokens, HKV, D)
    got_topk = layer.topk_indices_buffer[:tokens].transpose(0, 1)
    want_topk = ref.index_topk(iq, index_cache, index_table, lens, rows, topk=TOPK,
                               init_blocks=0, local_blocks=1)
    scores = ref.block_scores(iq, index_cache, index_table, lens, rows)
    assert_topk_valid(got_topk, want_topk, scores, TOPK)

    scales = dict(k_scale=layer._k_scale, v_scale=layer._v_scale) if fp8 else {}
    want_out, _ = ref.attention(q.view(tokens, HQ, D), kv, table, lens, rows,
                                topk=got_topk.contiguous(), softmax_scale=D ** -0.5, **scales)
    assert_close(output.view(tokens, HQ, D).float(), want_out, atol=2e-2, rtol=2e-2,
                 what=f"{step} {cache} out")


# ---- where msa does not apply: vLLM's own impls --------------------------------------------


def test_selectors_delegate_off_hopper(distributed: None, registered: None) -> None:
    """On this CPU (not CUDA sm_90) vLLM's own impls are chosen, whatever the dtype."""
    from vllm.models.minimax_m3.common import indexer as vllm_indexer
    from vllm.models.minimax_m3.common import sparse_attention as vllm_sparse

    with set_current_vllm_config(vllm_config("auto", "bf16", 0)):
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

    with set_current_vllm_config(vllm_config(main_dtype if main_dtype != "auto" else "auto",
                                             index_dtype, 0)):
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

    with set_current_vllm_config(vllm_config("auto", "bf16", 8)):
        _, main = vllm_sparse.select_main_backend_and_impl_cls(
            topk_blocks=TOPK, kv_cache_dtype="auto", num_kv_heads=HKV)
    assert main is vllm_sparse.MiniMaxM3SparseTritonImpl
