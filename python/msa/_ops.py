"""Keyword-only Python wrappers of the ``torch.ops.msa`` operators.

Every op is an out variant: it writes into tensors the caller owns and returns ``None``. Shapes
use T = query rows, Hq / Hkv / H_idx = q / KV / index heads on this rank, D = head_dim (128),
Di = index_dim (128), bs = block_size (128), K = top-k capacity (16), B = requests.

Workspaces: each op takes an optional ``workspace`` (uint8, on the op's device). When it is
``None`` the wrapper sizes one for these shapes and allocates it with torch; under CUDA-graph
capture or ``torch.compile``, pass a preallocated workspace instead (``msa.allocate_buffers``
sizes one for a whole step from declared capacities).

Errors: a call the library rejects raises ``ValueError`` (invalid argument), ``IndexError``
(value out of range), ``NotImplementedError`` (unsupported combination) or ``RuntimeError``,
with the library's message naming the offending argument.
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
from typing import Callable, Optional, TypeVar, Union

import torch

Tensor = torch.Tensor

# The library aligns the workspace start to 256 bytes itself; this much slack guarantees the
# requested size remains after alignment whatever the tensor's address.
WORKSPACE_ALIGNMENT = 256


class PreAttentionMode(enum.IntEnum):
    """What the fused pre-attention op does with a layer's rows (spec A11)."""

    DENSE = 0  # norm + RoPE on q, k; K/V inserted when a cache is given; no index branch
    SPARSE = 1  # index branch on: index_q / index_k normed and roped, index_k inserted
    SKIP_INDEX = 2  # top-k reuse layer: index segments and index cache left untouched


def padded_workspace_bytes(nbytes: int) -> int:
    """Bytes to allocate so that ``nbytes`` remain after the library's 256-byte alignment."""
    return nbytes + WORKSPACE_ALIGNMENT if nbytes > 0 else 0


# Kernels and sizing ops raise RuntimeError("msa.<op>: <status code>: <message>"); the wrappers
# raise the Python exception of the status code.
_STATUS_ERRORS = {
    "invalid_argument": ValueError,
    "workspace_too_small": ValueError,
    "out_of_range": IndexError,
    "not_supported": NotImplementedError,
}
_STATUS_MESSAGE = re.compile(r"msa\.\w+: (\w+): ")


def _raise_as_status(error: RuntimeError) -> None:
    """Re-raises an op's RuntimeError as the exception of its status code (if it has one)."""
    match = _STATUS_MESSAGE.search(str(error))
    kind = _STATUS_ERRORS.get(match.group(1)) if match else None
    if kind is None:
        raise error
    raise kind(str(error)[match.start():]) from None


@functools.lru_cache(maxsize=None)
def _argument_names(op: str) -> tuple[str, ...]:
    """Argument names of ``torch.ops.msa.<op>`` in schema order (the one table, ops.cpp)."""
    return tuple(a.name for a in getattr(torch.ops.msa, op).default._schema.arguments)


def _size(op: str, device: str, *args: object) -> int:
    """Workspace bytes ``torch.ops.msa.<op>_workspace_size`` reports for these arguments
    (the op's, in schema order, less the workspace)."""
    try:
        return int(getattr(torch.ops.msa, f"{op}_workspace_size")(device, *args))
    except RuntimeError as error:
        _raise_as_status(error)
        raise


def _run(op: str, device: torch.device, arguments: dict[str, object]) -> None:
    """Calls ``torch.ops.msa.<op>`` with a wrapper's keyword arguments (its ``locals()``),
    sizing and allocating a workspace when ``arguments["workspace"]`` is None."""
    names = _argument_names(op)
    workspace = arguments["workspace"]
    if workspace is None:
        nbytes = _size(op, str(device), *(arguments[n] for n in names if n != "workspace"))
        workspace = torch.empty(padded_workspace_bytes(nbytes), dtype=torch.uint8, device=device)
    values = [workspace if n == "workspace" else arguments[n] for n in names]
    try:
        getattr(torch.ops.msa, op)(*values)
    except RuntimeError as error:
        _raise_as_status(error)
        raise


F = TypeVar("F", bound=Callable[..., object])


def mirrors(wrapper: Callable[..., object]) -> Callable[[F], F]:
    """Decorates a reference function of an op (msa.reference) so that it shares the op
    wrapper's signature: each of its parameters the wrapper also has is declared without a
    default and gets the wrapper's; parameters of its own keep theirs. A default repeated in
    the reference raises TypeError at import."""

    wrapper_params = inspect.signature(wrapper).parameters

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        params = []
        for name, p in signature.parameters.items():
            if name not in wrapper_params:
                params.append(p)
                continue
            if p.default is not p.empty:
                raise TypeError(f"{fn.__module__}.{fn.__name__}: the default of {name} is the "
                                f"wrapper's (msa.{wrapper.__name__}); do not repeat it")
            params.append(p.replace(default=wrapper_params[name].default))
        merged = signature.replace(parameters=params)

        @functools.wraps(fn)
        def call(**kwargs: object) -> object:
            bound = merged.bind(**kwargs)
            bound.apply_defaults()
            return fn(**bound.arguments)

        call.__signature__ = merged  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return decorate


def _mode(mode: Union[PreAttentionMode, str, int]) -> int:
    if isinstance(mode, str):
        return int(PreAttentionMode[mode.upper()])
    return int(PreAttentionMode(mode))


def fused_qknorm_rope(
    *,
    qkv: Tensor,
    positions: Tensor,
    cos_sin_cache: Tensor,
    q_norm_weight: Tensor,
    k_norm_weight: Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    mode: Union[PreAttentionMode, str] = PreAttentionMode.SPARSE,
    num_index_heads: int = 0,
    rotary_dim: int = 64,
    eps: float = 1e-6,
    index_q_norm_weight: Optional[Tensor] = None,
    index_k_norm_weight: Optional[Tensor] = None,
    slot_mapping: Optional[Tensor] = None,
    kv_cache: Optional[Tensor] = None,
    k_scale: Optional[Tensor] = None,
    v_scale: Optional[Tensor] = None,
    index_slot_mapping: Optional[Tensor] = None,
    index_cache: Optional[Tensor] = None,
    q_out: Optional[Tensor] = None,
    index_q_out: Optional[Tensor] = None,
    error_flags: Optional[Tensor] = None,
    workspace: Optional[Tensor] = None,
) -> None:
    """Fused pre-attention: Gemma RMSNorm + partial NeoX RoPE, KV and index-K insert (A11).

    Per token t at position p = positions[t]: q and k heads are normed (weights q_norm_weight,
    k_norm_weight) and roped; k is rewritten in place in qkv and inserted with the raw v into
    kv_cache at slot_mapping[t]; in ``SPARSE`` mode index_q / index_k are processed the same way
    and index_k is inserted into index_cache at index_slot_mapping[t] (or slot_mapping[t]).
    q (index_q) go to q_out (index_q_out) when given, else they are written in place. A
    negative slot writes nothing; a negative position marks a padding row (outputs zeroed,
    qkv and caches unchanged). ``SKIP_INDEX`` leaves the index segments and cache untouched.

    Args:
        qkv: [T, W] bfloat16 or float16, last stride 1, modified in place. W = (Hq + 2 Hkv) * D
            (dense rows) or (Hq + 2 Hkv + H_idx) * D + Di (sparse rows: [q | k | v | iq | ik]).
        positions: [T] int64 or int32.
        cos_sin_cache: [max_pos, rotary_dim] float32 / bfloat16 / float16, cos half then sin
            half (``make_rope_cache`` builds one).
        q_norm_weight, k_norm_weight: [D], qkv's dtype or float32.
        num_q_heads, num_kv_heads: Hq and Hkv of this rank.
        mode: ``PreAttentionMode`` or its name ("dense", "sparse", "skip_index").
        num_index_heads: H_idx carried by sparse rows (0 for dense rows).
        rotary_dim: rotated leading dims of each head (even, <= D).
        eps: RMSNorm epsilon.
        index_q_norm_weight, index_k_norm_weight: [Di], sparse mode only.
        slot_mapping: [T] int64 or int32, slot = page * bs + offset, < 0 = skip.
        kv_cache: packed [num_blocks, Hkv, bs, 2 D] or split [num_blocks, 2, bs, Hkv, D]
            (NHD, or HND through strides); bfloat16 / float16 / float8_e4m3fn. Modified.
        k_scale, v_scale: float32 fp8 scales, [] / [1] (per layer) or
            [Hkv, num_blocks * bs] (per token and head); stored = e4m3(x / scale).
        index_slot_mapping: [T] int64 or int32 (defaults to slot_mapping).
        index_cache: [num_blocks, bs, Di] bfloat16 or float8_e4m3fn (no scale). Modified in
            sparse mode; accepted and left untouched in skip_index mode (dense: not allowed).
        q_out: [T, Hq, D] or [T, Hq * D], qkv's dtype. Written.
        index_q_out: [T, H_idx, Di] or [T, H_idx * Di], bfloat16 or float8_e4m3fn. Written.
        error_flags: [1] int32; device-side range errors OR bits into it (msa DeviceError).
        workspace: uint8 scratch on qkv's device, or None to allocate one.
    """
    pre_attention_mode = _mode(mode)
    _run("fused_qknorm_rope", qkv.device, locals())


def rope_cache(
    *, cos_sin_out: Tensor, theta: float = 5e6, workspace: Optional[Tensor] = None
) -> None:
    """Fills a RoPE cos/sin table (A11): row p = [cos(p f_i) ..., sin(p f_i) ...].

    f_i = theta^(-2 i / rotary_dim), computed in float64 and rounded once to float32.

    Args:
        cos_sin_out: [max_pos, rotary_dim] float32. Written.
        theta: RoPE base (MiniMax-M3: 5e6).
        workspace: uint8 scratch on the table's device, or None to allocate one.
    """
    _run("rope_cache", cos_sin_out.device, locals())


def make_rope_cache(
    max_positions: int,
    rotary_dim: int = 64,
    *,
    theta: float = 5e6,
    device: Union[torch.device, str] = "cpu",
) -> Tensor:
    """Allocates and fills a [max_positions, rotary_dim] float32 cos/sin table."""
    table = torch.empty(max_positions, rotary_dim, dtype=torch.float32, device=device)
    rope_cache(cos_sin_out=table, theta=theta)
    return table


def index_topk_decode(
    *,
    index_q: Tensor,
    index_cache: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    topk_out: Tensor,
    query_len: int = 1,
    topk: int = 16,
    init_blocks: int = 0,
    local_blocks: int = 1,
    error_flags: Optional[Tensor] = None,
    workspace: Optional[Tensor] = None,
) -> None:
    """Index scores and top-k block selection for decode rows (A2-A4, A8).

    Rows are request-major, exactly ``query_len`` per request: row r of request i is at
    position seq_lens[i] - query_len + r. topk_out[h, row] gets the selected logical block ids
    in ascending order, then -1; rows at a negative position (padded requests) get all -1.

    Args:
        index_q: [T, H_idx, Di] bfloat16 or float8_e4m3fn, T = B * query_len.
        index_cache: [num_blocks, bs, Di] bfloat16 or float8_e4m3fn, last stride 1.
        block_table: [B, max_blocks] int32, index-cache pages of each request.
        seq_lens: [B] int32, tokens in the cache (0 = padded request).
        topk_out: [H_idx, >= T, K] int32 (the shared buffer; rows [0, T) written).
        query_len: rows per request, 1..8 (1 + speculative tokens).
        topk: blocks kept per row (<= K).
        init_blocks, local_blocks: forced leading / trailing blocks.
        error_flags: [1] int32, optional.
        workspace: uint8 scratch, or None to allocate one.
    """
    _run("index_topk_decode", index_q.device, locals())


def index_topk_prefill(
    *,
    index_q: Tensor,
    index_cache: Tensor,
    block_table: Tensor,
    cu_seqlens_q: Tensor,
    seq_lens: Tensor,
    topk_out: Tensor,
    topk: int = 16,
    init_blocks: int = 0,
    local_blocks: int = 1,
    error_flags: Optional[Tensor] = None,
    workspace: Optional[Tensor] = None,
) -> None:
    """Index scores and top-k block selection for prefill rows (chunked prefill with prefix).

    Request b owns rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) at positions
    seq_lens[b] - q_len_b + i; rows from cu_seqlens_q[B] to T - 1 get all -1.

    Args:
        index_q: [T, H_idx, Di] bfloat16 or float8_e4m3fn.
        index_cache: [num_blocks, bs, Di] bfloat16 or float8_e4m3fn.
        block_table: [B, max_blocks] int32.
        cu_seqlens_q: [B + 1] int32, from 0, non-decreasing, last <= T.
        seq_lens: [B] int32, prefix + query tokens.
        topk_out: [H_idx, >= T, K] int32; pass ``topk_buffer[:, num_decode_tokens:]`` so the
            prefill rows follow the decode rows in the shared buffer.
        topk, init_blocks, local_blocks, error_flags, workspace: as ``index_topk_decode``.
    """
    _run("index_topk_prefill", index_q.device, locals())


def sparse_page16(
    *,
    topk: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    table_out: Tensor,
    context_lens_out: Tensor,
    query_len: int = 1,
    page_stride: int = 8,
    block_size: int = 128,
    error_flags: Optional[Tensor] = None,
    workspace: Optional[Tensor] = None,
) -> None:
    """Page-16 sparse block table of decode rows (A10) for a plain paged-attention kernel.

    Output row t * Hkv + h lists, for the valid ids of topk[h, t] in order, the page-16 ids
    (P * page_stride + j) * Hkv + h, j < block_size / 16, P = block_table[request, id]; unused
    entries are 0. context_lens_out is the attended length of that virtual sequence.

    Args:
        topk: [Hkv, >= T, K] int32.
        block_table: [B, max_blocks] int32, main-cache pages.
        seq_lens: [B] int32.
        table_out: [T * Hkv, K * block_size / 16] int32. Written.
        context_lens_out: [T * Hkv] int32. Written.
        query_len: decode rows per request.
        page_stride: 8 (separate K/V planes) or 16 (packed sides).
        block_size: tokens per block, a multiple of 16.
        error_flags, workspace: as above.
    """
    _run("sparse_page16", topk.device, locals())


def sparse_attention_decode(
    *,
    q: Tensor,
    kv_cache: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    topk: Tensor,
    out: Tensor,
    query_len: int = 1,
    softmax_scale: float = 0.0,
    k_scale: Optional[Tensor] = None,
    v_scale: Optional[Tensor] = None,
    lse: Optional[Tensor] = None,
    error_flags: Optional[Tensor] = None,
    workspace: Optional[Tensor] = None,
) -> None:
    """Sparse attention of decode rows over the selected blocks (A5, A8).

    q head h of row t attends, with exact softmax, to keys j <= p of the blocks listed in
    topk[h // (Hq / Hkv), t]. Rows at a negative position give out = 0, lse = -inf.

    Args:
        q: [T, Hq, D] bfloat16 / float16 / float32, last stride 1, T = B * query_len.
        kv_cache: packed [num_blocks, Hkv, bs, 2 D] or split [num_blocks, 2, bs, Hkv, D];
            bfloat16 / float16 / float8_e4m3fn.
        block_table: [B, max_blocks] int32.
        seq_lens: [B] int32 (0 = padded request).
        topk: [Hkv, >= T, K] int32, ascending ids then -1.
        out: [T, Hq, D], q's dtype or float32. Written.
        query_len: rows per request, 1..8.
        softmax_scale: 0 means D ** -0.5.
        k_scale, v_scale: fp8 cache scales (see ``fused_qknorm_rope``).
        lse: [T, Hq] float32, natural-log log-sum-exp. Written when given.
        error_flags, workspace: as above.
    """
    _run("sparse_attention_decode", q.device, locals())


def sparse_attention_prefill(
    *,
    q: Tensor,
    kv_cache: Tensor,
    block_table: Tensor,
    cu_seqlens_q: Tensor,
    seq_lens: Tensor,
    topk: Tensor,
    out: Tensor,
    softmax_scale: float = 0.0,
    k_scale: Optional[Tensor] = None,
    v_scale: Optional[Tensor] = None,
    lse: Optional[Tensor] = None,
    error_flags: Optional[Tensor] = None,
    workspace: Optional[Tensor] = None,
) -> None:
    """Sparse attention of prefill rows (A5); rows past cu_seqlens_q[B] give zeros.

    Args:
        q: [T, Hq, D] bfloat16 / float16 / float32.
        kv_cache: as ``sparse_attention_decode``.
        block_table: [B, max_blocks] int32.
        cu_seqlens_q: [B + 1] int32.
        seq_lens: [B] int32, prefix + query tokens.
        topk: [Hkv, >= T, K] int32; ``topk_buffer[:, num_decode_tokens:]``.
        out: [T, Hq, D]. Written.
        softmax_scale, k_scale, v_scale, lse, error_flags, workspace: as the decode form.
    """
    _run("sparse_attention_prefill", q.device, locals())


def dense_attention(
    *,
    q: Tensor,
    kv_cache: Tensor,
    block_table: Tensor,
    cu_seqlens_q: Tensor,
    seq_lens: Tensor,
    out: Tensor,
    softmax_scale: float = 0.0,
    k_scale: Optional[Tensor] = None,
    v_scale: Optional[Tensor] = None,
    lse: Optional[Tensor] = None,
    error_flags: Optional[Tensor] = None,
    workspace: Optional[Tensor] = None,
) -> None:
    """Dense causal GQA over the paged cache (layers 0-2), rows laid out as prefill rows.

    A decode batch is cu_seqlens_q = [0, L, 2L, ...].

    Args:
        q: [T, Hq, D]; kv_cache, block_table, cu_seqlens_q, seq_lens, out, lse: as
            ``sparse_attention_prefill``. softmax_scale, k_scale, v_scale, error_flags,
            workspace: as above.
    """
    _run("dense_attention", q.device, locals())


def batch_metadata(
    *,
    query_lens: Tensor,
    seq_lens: Tensor,
    block_table: Tensor,
    num_decode_requests: int,
    decode_query_len: int = 1,
    block_size: int = 128,
    index_block_table: Optional[Tensor] = None,
    query_start_loc: Optional[Tensor] = None,
    prefill_cu_seqlens_q: Optional[Tensor] = None,
    prefill_cu_seqlens_k: Optional[Tensor] = None,
    context_lens: Optional[Tensor] = None,
    kv_block_counts: Optional[Tensor] = None,
    token_request: Optional[Tensor] = None,
    token_position: Optional[Tensor] = None,
    slot_mapping: Optional[Tensor] = None,
    index_slot_mapping: Optional[Tensor] = None,
    totals: Optional[Tensor] = None,
    error_flags: Optional[Tensor] = None,
    workspace: Optional[Tensor] = None,
) -> None:
    """Per-step batch metadata, built on the device without host reads (A8).

    Requests are ordered decodes first (query length decode_query_len, or 0 with seq_len 0 for
    a padded request), then prefills. Every output is optional; outputs longer than the batch
    are filled past it with request -1, position -1, slot -1.

    Args:
        query_lens: [B] int32.
        seq_lens: [B] int32, cached + new tokens after this step.
        block_table: [B, max_blocks] int32, main-cache pages.
        num_decode_requests: nd, a host value the caller already has.
        decode_query_len: rows per decode request, 1..8.
        block_size: tokens per page.
        index_block_table: [B, max_blocks] int32, index-cache pages (for index_slot_mapping).
        query_start_loc: [B + 1] int32 row offsets. Written.
        prefill_cu_seqlens_q: [B - nd + 1] int32, rebased to 0. Written.
        prefill_cu_seqlens_k: [B - nd + 1] int32, cumulative prefill seq_lens. Written.
        context_lens: [B] int32, seq_len - query_len. Written.
        kv_block_counts: [B] int32, ceil(seq_len / block_size). Written.
        token_request: [max_tokens] int32. Written.
        token_position: [max_tokens] int32. Written.
        slot_mapping: [max_tokens] int64. Written.
        index_slot_mapping: [max_tokens] int64 (needs index_block_table). Written.
        totals: [4] int32: num_decode_tokens, num_prefill_tokens, num_tokens, total_kv_blocks
            (ceil(seq_len / block_size) summed over the prefill requests).
        error_flags, workspace: as above.
    """
    _run("batch_metadata", query_lens.device, locals())
