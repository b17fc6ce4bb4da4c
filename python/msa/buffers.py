"""Buffers sized once from declared capacities, so an engine allocates before serving and
captures CUDA graphs over stable addresses.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Union

import torch

from ._ops import PreAttentionMode, _size, padded_workspace_bytes

Tensor = torch.Tensor
Device = Union[torch.device, str]


@dataclasses.dataclass(frozen=True)
class Capacities:
    """Largest step an engine will run, and the per-rank model shapes.

    The defaults are MiniMax-M3 at tensor parallelism 4 (16 q heads, 1 KV head, 1 index head).

    Attributes:
        max_requests: requests per step (decode + prefill, padded ones included).
        max_tokens: query rows per step (decode rows + prefill rows).
        max_context: tokens per request (prefix + new), also the RoPE table length.
        max_decode_query_len: rows per decode request (1 + speculative tokens), 1..8.
        num_blocks: pages of the main and index caches (default: every request at
            max_context).
    """

    max_requests: int
    max_tokens: int
    max_context: int
    max_decode_query_len: int = 1
    num_q_heads: int = 16
    num_kv_heads: int = 1
    num_index_heads: int = 1
    head_dim: int = 128
    index_dim: int = 128
    rotary_dim: int = 64
    block_size: int = 128
    topk: int = 16
    num_blocks: int = 0

    @property
    def max_blocks_per_request(self) -> int:
        return math.ceil(self.max_context / self.block_size)

    @property
    def cache_blocks(self) -> int:
        return self.num_blocks or self.max_requests * self.max_blocks_per_request

    @property
    def qkv_width(self) -> int:
        """Elements per token of the fused [q | k | v | iq | ik] projection row."""
        return (
            self.num_q_heads + 2 * self.num_kv_heads + self.num_index_heads
        ) * self.head_dim + self.index_dim


@dataclasses.dataclass
class StepBuffers:
    """Persistent per-step buffers, shared by every layer of a forward pass.

    Shapes (C = Capacities): topk [H_idx, max_tokens, topk] int32 (the shared top-k buffer:
    decode rows first, then prefill rows); per-request metadata [max_requests (+1)] int32;
    per-token metadata [max_tokens] (slots int64); q [max_tokens, Hq, D] in the activation
    dtype (that of qkv: bfloat16 or float16); attn_out [max_tokens, Hq, D] in the output dtype
    (the activation dtype or float32); index_q [max_tokens, H_idx, Di] in the index dtype;
    lse [max_tokens, Hq] float32; totals [4] int32; error_flags [1] int32 (zeroed); workspace
    uint8, large enough for every op at capacity.
    """

    topk: Tensor
    query_start_loc: Tensor
    prefill_cu_seqlens_q: Tensor
    prefill_cu_seqlens_k: Tensor
    context_lens: Tensor
    kv_block_counts: Tensor
    token_request: Tensor
    token_position: Tensor
    slot_mapping: Tensor
    index_slot_mapping: Tensor
    totals: Tensor
    error_flags: Tensor
    q: Tensor
    index_q: Tensor
    attn_out: Tensor
    lse: Tensor
    workspace: Tensor


def _meta(*shape: int, dtype: torch.dtype) -> Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


# qkv (and so q, the fused op's q output) is bfloat16 or float16; attention outputs may also be
# float32 (the ops accept out in q's dtype or float32).
ACTIVATION_DTYPES = (torch.bfloat16, torch.float16)


def _check_dtypes(dtype: torch.dtype, out_dtype: Optional[torch.dtype]) -> torch.dtype:
    """Validates the activation dtype and returns the attention output dtype."""
    if dtype not in ACTIVATION_DTYPES:
        raise ValueError(
            f"dtype: {dtype} is not an activation dtype of msa (qkv and q are bfloat16 or "
            f"float16); for float32 attention outputs pass out_dtype=torch.float32")
    out_dtype = dtype if out_dtype is None else out_dtype
    if out_dtype not in (dtype, torch.float32):
        raise ValueError(f"out_dtype: {out_dtype}, expected {dtype} (the activation dtype) or "
                         f"torch.float32")
    return out_dtype


def workspace_bytes(
    caps: Capacities,
    device: Device,
    *,
    dtype: torch.dtype = torch.bfloat16,
    out_dtype: Optional[torch.dtype] = None,
    kv_cache_dtype: torch.dtype = torch.bfloat16,
    index_dtype: torch.dtype = torch.bfloat16,
) -> int:
    """Workspace bytes (alignment slack included) that serve every msa op up to ``caps``.

    Each op's size is queried at the capacity shapes (decode and prefill forms, the fused
    pre-attention op, metadata, page-16 table); the result is the maximum, so one workspace
    can be shared by all ops of a step, which run one after the other on one stream.

    ``dtype`` is the activation dtype (qkv and q: bfloat16 or float16); ``out_dtype`` that of
    the attention outputs (default ``dtype``; float32 allowed). Other dtypes raise ValueError.
    """
    out_dtype = _check_dtypes(dtype, out_dtype)
    dev = str(torch.device(device))
    i32, i64 = torch.int32, torch.int64
    c = caps
    t, r, mb, nb = c.max_tokens, c.max_requests, c.max_blocks_per_request, c.cache_blocks
    hq, hkv, hi, d, di = c.num_q_heads, c.num_kv_heads, c.num_index_heads, c.head_dim, c.index_dim
    kv_cache = _meta(nb, hkv, c.block_size, 2 * d, dtype=kv_cache_dtype)
    index_cache = _meta(nb, c.block_size, di, dtype=index_dtype)
    scales = (None, None)
    if kv_cache_dtype == torch.float8_e4m3fn:
        scales = (_meta(1, dtype=torch.float32), _meta(1, dtype=torch.float32))
    topk = _meta(hi, t, c.topk, dtype=i32)
    seq_lens = _meta(r, dtype=i32)
    cu = _meta(r + 1, dtype=i32)
    table = _meta(r, mb, dtype=i32)
    q = _meta(t, hq, d, dtype=dtype)
    out = _meta(t, hq, d, dtype=out_dtype)
    lse = _meta(t, hq, dtype=torch.float32)
    flags = _meta(1, dtype=i32)
    index_q = _meta(t, hi, di, dtype=index_dtype)
    dl = c.max_decode_query_len
    rd = max(1, min(r, t // dl))
    td = rd * dl
    norm_w = _meta(d, dtype=torch.float32)
    index_norm_w = _meta(di, dtype=torch.float32)
    sizes = [
        _size(
            "fused_qknorm_rope",
            dev, _meta(t, c.qkv_width, dtype=dtype), _meta(t, dtype=i64),
            _meta(c.max_context, c.rotary_dim, dtype=torch.float32), norm_w, norm_w,
            index_norm_w, index_norm_w, _meta(t, dtype=i64), kv_cache, *scales,
            _meta(t, dtype=i64), index_cache, q, index_q, flags, int(PreAttentionMode.SPARSE),
            hq, hkv, hi, c.rotary_dim, 1e-6),
        _size(
            "index_topk_decode",
            dev, _meta(td, hi, di, dtype=index_dtype), index_cache, _meta(rd, mb, dtype=i32),
            _meta(rd, dtype=i32), topk, flags, dl, c.topk, 0, 1),
        _size(
            "index_topk_prefill",
            dev, index_q, index_cache, table, cu, seq_lens, topk, flags, c.topk, 0, 1),
        _size(
            "sparse_page16",
            dev, _meta(hkv, td, c.topk, dtype=i32), _meta(rd, mb, dtype=i32),
            _meta(rd, dtype=i32), _meta(td * hkv, c.topk * c.block_size // 16, dtype=i32),
            _meta(td * hkv, dtype=i32), flags, dl, 8, c.block_size),
        _size(
            "sparse_attention_decode",
            dev, _meta(td, hq, d, dtype=dtype), kv_cache, *scales, _meta(rd, mb, dtype=i32),
            _meta(rd, dtype=i32), _meta(hkv, td, c.topk, dtype=i32),
            _meta(td, hq, d, dtype=out_dtype), _meta(td, hq, dtype=torch.float32), flags, dl,
            0.0),
        _size(
            "sparse_attention_prefill",
            dev, q, kv_cache, *scales, table, cu, seq_lens, _meta(hkv, t, c.topk, dtype=i32),
            out, lse, flags, 0.0),
        _size(
            "dense_attention",
            dev, q, kv_cache, *scales, table, cu, seq_lens, out, lse, flags, 0.0),
        _size(
            "batch_metadata",
            dev, seq_lens, seq_lens, table, table, cu, cu, cu, seq_lens, seq_lens,
            _meta(t, dtype=i32), _meta(t, dtype=i32), _meta(t, dtype=i64), _meta(t, dtype=i64),
            _meta(4, dtype=i32), flags, 0, dl, c.block_size),
    ]
    return padded_workspace_bytes(max(sizes))


def allocate_buffers(
    caps: Capacities,
    device: Device,
    *,
    dtype: torch.dtype = torch.bfloat16,
    out_dtype: Optional[torch.dtype] = None,
    kv_cache_dtype: torch.dtype = torch.bfloat16,
    index_dtype: torch.dtype = torch.bfloat16,
) -> StepBuffers:
    """Allocates every per-step buffer of ``StepBuffers`` at capacity on ``device``.

    ``dtype``: activation dtype of qkv and ``q`` (bfloat16 or float16); ``out_dtype``: that of
    ``attn_out`` (default ``dtype``, or float32). The KV and index caches are not included:
    engines own them (see ``allocate_caches``).
    """
    out_dtype = _check_dtypes(dtype, out_dtype)
    c = caps
    t, r = c.max_tokens, c.max_requests

    def i32(*shape: int) -> Tensor:
        return torch.empty(*shape, dtype=torch.int32, device=device)

    return StepBuffers(
        topk=torch.full((c.num_index_heads, t, c.topk), -1, dtype=torch.int32, device=device),
        query_start_loc=i32(r + 1),
        prefill_cu_seqlens_q=i32(r + 1),
        prefill_cu_seqlens_k=i32(r + 1),
        context_lens=i32(r),
        kv_block_counts=i32(r),
        token_request=i32(t),
        token_position=i32(t),
        slot_mapping=torch.empty(t, dtype=torch.int64, device=device),
        index_slot_mapping=torch.empty(t, dtype=torch.int64, device=device),
        totals=i32(4),
        error_flags=torch.zeros(1, dtype=torch.int32, device=device),
        q=torch.empty(t, c.num_q_heads, c.head_dim, dtype=dtype, device=device),
        index_q=torch.empty(t, c.num_index_heads, c.index_dim, dtype=index_dtype, device=device),
        attn_out=torch.empty(t, c.num_q_heads, c.head_dim, dtype=out_dtype, device=device),
        lse=torch.empty(t, c.num_q_heads, dtype=torch.float32, device=device),
        workspace=torch.empty(
            workspace_bytes(
                c, device, dtype=dtype, out_dtype=out_dtype, kv_cache_dtype=kv_cache_dtype,
                index_dtype=index_dtype,
            ),
            dtype=torch.uint8,
            device=device,
        ),
    )


def allocate_caches(
    caps: Capacities,
    device: Device,
    *,
    kv_cache_dtype: torch.dtype = torch.bfloat16,
    index_dtype: torch.dtype = torch.bfloat16,
) -> tuple[Tensor, Tensor]:
    """One layer's caches in vLLM's layouts, zero-filled: the packed main cache
    [cache_blocks, Hkv, bs, 2 D] and the index-K cache [cache_blocks, bs, Di]."""
    c = caps
    kv = torch.zeros(
        c.cache_blocks, c.num_kv_heads, c.block_size, 2 * c.head_dim, dtype=kv_cache_dtype,
        device=device,
    )
    index = torch.zeros(c.cache_blocks, c.block_size, c.index_dim, dtype=index_dtype,
                        device=device)
    return kv, index
