"""msa's implementations of vLLM's MiniMax-M3 sparse attention and indexer, and the wrapped
kernel selectors that choose them where msa applies.

Imported only when vLLM builds a MiniMax-M3 model (through ``msa.vllm_plugin.models``). vLLM's
own backend, metadata and metadata builders stay in use: the impls read the same per-step
metadata and the same shared top-k buffer as vLLM's Triton impls, and run the step with
``msa.vllm_plugin.steps`` (the msa ops).
"""

from __future__ import annotations

import inspect
from typing import Callable, Optional

import torch

import msa
from msa.vllm_plugin import logger, steps
from vllm.config import get_current_vllm_config
from vllm.forward_context import get_forward_context
from vllm.models.minimax_m3.common import indexer as vllm_indexer
from vllm.models.minimax_m3.common import sparse_attention as vllm_sparse
from vllm.platforms import current_platform

MAX_TOPK = 16  # the top-k capacity of msa's kernels
MAX_DECODE_QUERY_LEN = 8  # 1 + speculative tokens
BLOCK = 128  # block size == page size, and head / index dims
MAIN_CACHE_DTYPES = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn,
                     "bfloat16": torch.bfloat16}
INDEX_CACHE_DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn,
                      "fp8_e4m3": torch.float8_e4m3fn}

# The vLLM signatures this module wraps or implements (parameter names in order). A vLLM whose
# signatures differ is not patched (``signature_drift`` names the difference).
EXPECTED_SIGNATURES = {
    "select_main_backend_and_impl_cls": (
        vllm_sparse, "select_main_backend_and_impl_cls",
        ("topk_blocks", "kv_cache_dtype", "num_kv_heads", "emits_sparse_block_table")),
    "select_indexer_impl_cls": (
        vllm_indexer, "select_indexer_impl_cls", ("topk_blocks", "indexer_kv_dtype")),
    "MiniMaxM3SparseImpl.__init__": (
        vllm_sparse.MiniMaxM3SparseImpl, "__init__",
        ("self", "num_heads", "head_size", "scale", "num_kv_heads", "kv_cache_dtype",
         "topk_blocks", "sparse_block_size", "msa_decode_backend")),
    "MiniMaxM3SparseImpl.forward": (
        vllm_sparse.MiniMaxM3SparseImpl, "forward",
        ("self", "layer", "query", "kv_cache", "output", "query_fp8")),
    "MiniMaxM3IndexerImpl.__init__": (
        vllm_indexer.MiniMaxM3IndexerImpl, "__init__",
        ("self", "num_kv_heads", "scale", "topk_blocks", "sparse_block_size", "num_index_heads",
         "index_head_dim", "prefix", "init_blocks", "local_blocks", "score_type",
         "cache_config", "indexer_kv_dtype", "topk_indices_buffer")),
    "MiniMaxM3IndexerImpl.forward": (
        vllm_indexer.MiniMaxM3IndexerImpl, "forward", ("self", "index_query")),
}


def signature_drift() -> list[str]:
    """Differences between vLLM's signatures and ``EXPECTED_SIGNATURES`` (empty: none)."""
    drift = []
    for name, (owner, attr, expected) in EXPECTED_SIGNATURES.items():
        fn = getattr(owner, attr, None)
        if fn is None:
            drift.append(f"{name}: missing")
            continue
        fn = getattr(fn, "__wrapped__", fn)
        got = tuple(inspect.signature(fn).parameters)
        if got != expected:
            drift.append(f"{name}{got}, expected {expected}")
    return drift


# ---- where msa applies --------------------------------------------------------------------


def _platform_reason() -> Optional[str]:
    """Why msa cannot run on this platform and build, or None when it can."""
    if not current_platform.is_cuda():
        return "not a CUDA platform"
    capability = current_platform.get_device_capability()
    if capability is None or (capability.major, capability.minor) != (9, 0):
        return f"device capability {capability}, msa's kernels are built for sm_90"
    if not msa.built_with_cuda():
        return "this msa build has no CUDA backend"
    return None


def _model_reason(topk_blocks: int) -> Optional[str]:
    """Why the model or engine configuration rules msa out, or None."""
    config = get_current_vllm_config()
    hf_config = config.model_config.hf_config
    text = getattr(hf_config, "text_config", hf_config)
    sparse = text.sparse_attention_config
    spec = config.speculative_config
    query_len = 1 + (spec.num_speculative_tokens if spec is not None else 0)
    checks = [
        (topk_blocks <= MAX_TOPK, f"topk_blocks {topk_blocks} > {MAX_TOPK}"),
        (sparse["sparse_block_size"] == BLOCK,
         f"sparse_block_size {sparse['sparse_block_size']} != {BLOCK}"),
        (config.cache_config.block_size == BLOCK,
         f"cache block size {config.cache_config.block_size} != {BLOCK}"),
        (text.head_dim == BLOCK, f"head_dim {text.head_dim} != {BLOCK}"),
        (sparse["sparse_index_dim"] == BLOCK,
         f"sparse_index_dim {sparse['sparse_index_dim']} != {BLOCK}"),
        (sparse.get("sparse_score_type", "max") == "max",
         f"sparse_score_type {sparse.get('sparse_score_type')!r} != 'max'"),
        (query_len <= MAX_DECODE_QUERY_LEN,
         f"1 + speculative tokens = {query_len} > {MAX_DECODE_QUERY_LEN}"),
    ]
    failed = [reason for ok, reason in checks if not ok]
    return "; ".join(failed) if failed else None


def main_cache_dtype(kv_cache_dtype: str) -> Optional[torch.dtype]:
    """The torch dtype of a main KV cache msa reads, or None for one it does not."""
    if kv_cache_dtype == "auto":
        model_dtype = get_current_vllm_config().model_config.dtype
        return model_dtype if model_dtype == torch.bfloat16 else None
    return MAIN_CACHE_DTYPES.get(kv_cache_dtype)


_logged: set[str] = set()


def _log_once(message: str, *args: object) -> None:
    text = message % args
    if text not in _logged:
        _logged.add(text)
        logger.info(text)


def _choose(what: str, reasons: list[Optional[str]], msa_name: str, vllm_name: str) -> bool:
    failed = [r for r in reasons if r is not None]
    if failed:
        _log_once("msa: MiniMax-M3 %s: vLLM's own %s runs (msa does not apply: %s)", what,
                  vllm_name, "; ".join(failed))
        return False
    _log_once("msa: MiniMax-M3 %s runs on msa (%s)", what, msa_name)
    return True


# ---- one workspace per device -------------------------------------------------------------

_workspaces: dict[torch.device, torch.Tensor] = {}


def _capacities(num_q_heads: int, num_kv_heads: int, num_index_heads: int,
                topk_blocks: int) -> msa.Capacities:
    """The largest step vLLM's scheduler can send, for this rank's shapes."""
    config = get_current_vllm_config()
    spec = config.speculative_config
    return msa.Capacities(
        max_requests=config.scheduler_config.max_num_seqs,
        max_tokens=config.scheduler_config.max_num_batched_tokens,
        max_context=config.model_config.max_model_len,
        max_decode_query_len=1 + (spec.num_speculative_tokens if spec is not None else 0),
        num_q_heads=num_q_heads,
        num_kv_heads=num_kv_heads,
        num_index_heads=num_index_heads,
        topk=topk_blocks,
    )


def reserve_workspace(caps: msa.Capacities, **dtypes: torch.dtype) -> torch.device:
    """Makes the workspace of the current default device (where vLLM builds the model) large
    enough for every msa op at ``caps``; every layer of the device shares it (the ops run one
    after the other on one stream). Called while the model is built, before any forward or
    CUDA-graph capture, so the address never changes afterwards."""
    device = torch.get_default_device()
    nbytes = msa.workspace_bytes(caps, device, dtype=get_current_vllm_config().model_config.dtype,
                                 **dtypes)
    current = _workspaces.get(device)
    if current is None or current.numel() < nbytes:
        _workspaces[device] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return device


def workspace(device: torch.device) -> torch.Tensor:
    ws = _workspaces.get(device)
    if ws is None:
        raise RuntimeError(f"msa: no workspace was reserved on {device}: the msa impls run on "
                           f"the device vLLM built the model on")
    return ws


def _step_metadata(prefix: str) -> Optional[object]:
    """This layer's metadata of the current step, or None in vLLM's profiling run."""
    attn_metadata = get_forward_context().attn_metadata
    if not isinstance(attn_metadata, dict):
        return None  # profiling run: caches unbound
    return attn_metadata[prefix]


# ---- the impls ----------------------------------------------------------------------------


class MsaSparseImpl(vllm_sparse.MiniMaxM3SparseImpl):
    """Sparse attention over the indexer's blocks: msa.sparse_attention_decode for the decode
    rows, msa.sparse_attention_prefill for the prefill rows."""

    def __init__(self, num_heads: int, head_size: int, scale: float,
                 num_kv_heads: Optional[int] = None, kv_cache_dtype: str = "auto", *,
                 topk_blocks: int, sparse_block_size: int,
                 msa_decode_backend: str = "triton") -> None:
        super().__init__(num_heads, head_size, scale, num_kv_heads, kv_cache_dtype,
                         topk_blocks=topk_blocks, sparse_block_size=sparse_block_size,
                         msa_decode_backend=msa_decode_backend)
        cache_dtype = main_cache_dtype(kv_cache_dtype)
        if cache_dtype is None:
            raise ValueError(f"msa: kv_cache_dtype {kv_cache_dtype!r} is not a cache dtype of msa "
                             f"(bfloat16 or fp8 e4m3)")
        self.cache_dtype = cache_dtype
        self.device = reserve_workspace(
            _capacities(num_heads, self.num_kv_heads, self.num_kv_heads, topk_blocks),
            kv_cache_dtype=cache_dtype)

    def forward(self, layer: torch.nn.Module, query: torch.Tensor, kv_cache: torch.Tensor,
                output: torch.Tensor, *, query_fp8: Optional[torch.Tensor] = None) -> torch.Tensor:
        if query_fp8 is not None:
            raise NotImplementedError("msa: an fp8 query (query_fp8) is not supported; vLLM "
                                      "passes one only to its CUTLASS decode impl")
        md = _step_metadata(layer.layer_name)
        if md is None:
            return output
        k_scale = v_scale = None
        if self.cache_dtype == torch.float8_e4m3fn:
            kv_cache = kv_cache.view(torch.float8_e4m3fn)  # vLLM stores fp8 caches as uint8
            k_scale, v_scale = layer._k_scale, layer._v_scale
        return steps.attend(
            md, query=query, output=output, kv_cache=kv_cache,
            topk_buffer=layer.topk_indices_buffer, num_heads=self.num_heads,
            head_size=self.head_size, scale=self.scale, k_scale=k_scale, v_scale=v_scale,
            workspace=workspace(query.device))


class MsaIndexerImpl(vllm_indexer.MiniMaxM3IndexerImpl):
    """Index scores and top-k selection: msa.index_topk_decode / msa.index_topk_prefill into
    the shared top-k buffer (decode rows first, then prefill rows)."""

    indexer_backend_cls = vllm_indexer.MiniMaxM3IndexerBackend

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        if self.topk_indices_buffer is None:
            raise ValueError("msa: the indexer needs vLLM's shared topk_indices_buffer (the "
                             "model allocates it for every sparse layer)")
        self.device = reserve_workspace(
            _capacities(self.num_kv_heads, self.num_kv_heads, self.num_index_heads,
                        self.topk_blocks),
            index_dtype=self.index_cache.dtype)

    def forward(self, index_query: torch.Tensor) -> tuple[Optional[torch.Tensor],
                                                          Optional[torch.Tensor]]:
        md = _step_metadata(self.index_cache.prefix)
        if md is None:
            return None, None
        return steps.select_blocks(
            md, index_query=index_query, index_cache=self.index_cache.kv_cache,
            topk_buffer=self.topk_indices_buffer, num_index_heads=self.num_index_heads,
            index_head_dim=self.index_head_dim, topk=self.topk_blocks,
            init_blocks=self.init_blocks, local_blocks=self.local_blocks,
            workspace=workspace(index_query.device))


# ---- the wrapped selectors ----------------------------------------------------------------


def wrap_main_selector(original: Callable[..., tuple]) -> Callable[..., tuple]:
    def select_main_backend_and_impl_cls(*, topk_blocks: int, kv_cache_dtype: str,
                                         num_kv_heads: int,
                                         emits_sparse_block_table: bool = False) -> tuple:
        dtype = main_cache_dtype(kv_cache_dtype)
        reasons = [_platform_reason(), _model_reason(topk_blocks),
                   None if dtype is not None else f"kv_cache_dtype {kv_cache_dtype!r}",
                   "the indexer emits the attention's block table"
                   if emits_sparse_block_table else None]
        if _choose("sparse attention", reasons, f"kv cache {dtype}", "implementation"):
            return vllm_sparse.MiniMaxM3SparseBackend, MsaSparseImpl
        return original(topk_blocks=topk_blocks, kv_cache_dtype=kv_cache_dtype,
                        num_kv_heads=num_kv_heads,
                        emits_sparse_block_table=emits_sparse_block_table)

    select_main_backend_and_impl_cls.__wrapped__ = original  # type: ignore[attr-defined]
    return select_main_backend_and_impl_cls


def wrap_indexer_selector(original: Callable[..., type]) -> Callable[..., type]:
    def select_indexer_impl_cls(*, topk_blocks: int, indexer_kv_dtype: str = "bf16") -> type:
        config = get_current_vllm_config()
        reasons = [_platform_reason(), _model_reason(topk_blocks),
                   None if indexer_kv_dtype in INDEX_CACHE_DTYPES
                   else f"indexer_kv_dtype {indexer_kv_dtype!r}",
                   "indexer context parallelism is on"
                   if config.attention_config.minimax_m3_indexer_cp else None]
        if _choose("indexer", reasons, f"index cache {indexer_kv_dtype}", "indexer"):
            return MsaIndexerImpl
        return original(topk_blocks=topk_blocks, indexer_kv_dtype=indexer_kv_dtype)

    select_indexer_impl_cls.__wrapped__ = original  # type: ignore[attr-defined]
    return select_indexer_impl_cls


def install() -> bool:
    """Wraps vLLM's selectors where vLLM looks them up (idempotent). Returns False, with one
    log line and vLLM untouched, when vLLM's signatures differ from the ones msa knows."""
    from vllm.models.minimax_m3.nvidia import model as vllm_model

    if getattr(vllm_sparse.select_main_backend_and_impl_cls, "__wrapped__", None) is not None:
        return True
    drift = signature_drift()
    if drift:
        logger.warning("msa: vLLM's MiniMax-M3 interfaces changed (%s); the msa plugin leaves "
                       "vLLM untouched", "; ".join(drift))
        return False
    main = wrap_main_selector(vllm_sparse.select_main_backend_and_impl_cls)
    vllm_sparse.select_main_backend_and_impl_cls = main
    vllm_model.select_main_backend_and_impl_cls = main  # imported there by name
    vllm_indexer.select_indexer_impl_cls = wrap_indexer_selector(
        vllm_indexer.select_indexer_impl_cls)
    return True
