"""Pure-torch reference of every msa op (spec Part A), written for clarity, not speed.

Math is float64 unless noted; tensors are ordinary (CPU or CUDA) torch tensors. The in-place
ops of the library are mirrored by functions that modify clones and return them, so a test can
compare the library's buffers with the reference's. Each mirror takes the op wrapper's keyword
arguments (less its outputs, error flags and workspace) with the wrapper's defaults:
``@mirrors`` takes them from the wrapper, so they are defined once, in msa/_ops.py.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from . import _ops
from ._ops import mirrors

Tensor = torch.Tensor

E4M3_MAX = 448.0
NAN_SCORE = -1e30  # a NaN block score ranks below every real score (A12)


# ---- numerics ------------------------------------------------------------------------------


def to_e4m3(x: Tensor) -> Tensor:
    """OCP e4m3fn with round-to-nearest-even and saturation to +-448; NaN stays NaN (A7)."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def round_to(x: Tensor, dtype: torch.dtype) -> Tensor:
    """Rounds float32 values once to a storage dtype (saturating for e4m3)."""
    return to_e4m3(x) if dtype == torch.float8_e4m3fn else x.to(torch.float32).to(dtype)


def gemma_rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x * rsqrt(mean(x^2) + eps) * (1 + w) over the last dim, float32."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())


def rope_cos_sin(max_positions: int, rotary_dim: int, theta: float) -> Tensor:
    """[max_positions, rotary_dim] float32: cos(p f_i) for i < r/2, then sin(p f_i);
    f_i = theta^(-2 i / r), computed in float64."""
    half = rotary_dim // 2
    freqs = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * freqs[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=1).float()


def apply_neox_rope(x: Tensor, cos_sin: Tensor, rotary_dim: int) -> Tensor:
    """Rotates dims [0, rotary_dim) of x [..., D] NeoX style, pairs (i, i + rotary_dim / 2).

    cos_sin: [..., rotary_dim] rows of the table for each x row (broadcast over heads).
    """
    half = rotary_dim // 2
    cos, sin = cos_sin[..., :half].float(), cos_sin[..., half:rotary_dim].float()
    x1, x2 = x[..., :half], x[..., half:rotary_dim]
    rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return torch.cat([rotated, x[..., rotary_dim:]], dim=-1)


# ---- KV cache layouts ----------------------------------------------------------------------


def kv_views(kv_cache: Tensor) -> tuple[Tensor, Tensor]:
    """K and V views [num_blocks, Hkv, bs, D] of a packed [nb, Hkv, bs, 2 D] or split
    [nb, 2, bs, Hkv, D] (NHD, or HND through strides) cache; writes go to the cache (A6)."""
    if kv_cache.dim() == 4:
        d = kv_cache.shape[-1] // 2
        return kv_cache[..., :d], kv_cache[..., d:]
    return kv_cache[:, 0].permute(0, 2, 1, 3), kv_cache[:, 1].permute(0, 2, 1, 3)


def _scale_at(scale: Optional[Tensor], head: int, slot: int) -> float:
    if scale is None:
        return 1.0
    if scale.dim() <= 1:
        return float(scale.reshape(-1)[0])
    return float(scale[head, slot])


def dequantized_kv(
    kv_cache: Tensor, k_scale: Optional[Tensor] = None, v_scale: Optional[Tensor] = None
) -> tuple[Tensor, Tensor]:
    """K and V as float64 [num_blocks, Hkv, bs, D]: float(stored) * scale per the scale mode
    (none, per layer [] / [1], per token and head [Hkv, num_blocks * bs] indexed by slot)."""
    k, v = (t.to(torch.float64) for t in kv_views(kv_cache))
    nb, hkv, bs, _ = k.shape

    def apply(x: Tensor, scale: Optional[Tensor]) -> Tensor:
        if scale is None:
            return x
        if scale.dim() <= 1:
            return x * float(scale.reshape(-1)[0])
        per_slot = scale.to(torch.float64).reshape(hkv, nb, bs).permute(1, 0, 2)
        return x * per_slot[..., None]

    return apply(k, k_scale), apply(v, v_scale)


# ---- fused pre-attention (A11) -------------------------------------------------------------


@dataclasses.dataclass
class PreAttentionResult:
    """Buffers after the fused op: clones of the inputs the op modifies."""

    qkv: Tensor
    kv_cache: Optional[Tensor]
    index_cache: Optional[Tensor]
    q_out: Optional[Tensor]
    index_q_out: Optional[Tensor]


@mirrors(_ops.fused_qknorm_rope)
def fused_qknorm_rope(
    *,
    qkv: Tensor,
    positions: Tensor,
    cos_sin_cache: Tensor,
    q_norm_weight: Tensor,
    k_norm_weight: Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    mode: object,
    num_index_heads: int,
    rotary_dim: int,
    eps: float,
    index_q_norm_weight: Optional[Tensor],
    index_k_norm_weight: Optional[Tensor],
    slot_mapping: Optional[Tensor],
    kv_cache: Optional[Tensor],
    k_scale: Optional[Tensor],
    v_scale: Optional[Tensor],
    index_slot_mapping: Optional[Tensor],
    index_cache: Optional[Tensor],
    q_out: Optional[Tensor],
    index_q_out: Optional[Tensor],
) -> PreAttentionResult:
    """Reference of ``msa.fused_qknorm_rope``: same arguments, returns modified clones.

    mode is "dense", "sparse" or "skip_index" (a ``PreAttentionMode`` name, any case).
    """
    mode = str(getattr(mode, "name", mode)).lower()
    qkv = qkv.clone()
    kv_cache = kv_cache.clone() if kv_cache is not None else None
    index_cache = index_cache.clone() if index_cache is not None else None
    q_out = q_out.clone() if q_out is not None else None
    index_q_out = index_q_out.clone() if index_q_out is not None else None

    nq, nkv, niq = num_q_heads, num_kv_heads, num_index_heads
    d = q_norm_weight.shape[0]
    di = index_q_norm_weight.shape[0] if index_q_norm_weight is not None else d
    q_end, k_end, v_end = nq * d, (nq + nkv) * d, (nq + 2 * nkv) * d
    iq_end = v_end + niq * di
    index_branch = mode == "sparse"
    if index_slot_mapping is None:
        index_slot_mapping = slot_mapping
    k_view, v_view = kv_views(kv_cache) if kv_cache is not None else (None, None)
    bs = k_view.shape[2] if k_view is not None else None
    index_bs = index_cache.shape[1] if index_cache is not None else None

    def norm_rope(x: Tensor, weight: Tensor, pos: int) -> Tensor:
        return apply_neox_rope(gemma_rms_norm(x, weight, eps), cos_sin_cache[pos], rotary_dim)

    for t in range(qkv.shape[0]):
        pos = int(positions[t])
        if pos < 0:  # padding row: outputs zeroed, qkv and caches unchanged
            if q_out is not None:
                q_out[t].zero_()
            if index_q_out is not None and index_branch:
                index_q_out[t].zero_()
            continue
        row = qkv[t]
        q = norm_rope(row[:q_end].view(nq, d), q_norm_weight, pos)
        k = norm_rope(row[q_end:k_end].view(nkv, d), k_norm_weight, pos)
        v = row[k_end:v_end].view(nkv, d).float()
        if q_out is not None:
            q_out[t].copy_(round_to(q, q_out.dtype).reshape(q_out[t].shape))
        else:
            row[:q_end] = round_to(q, qkv.dtype).reshape(-1)
        row[q_end:k_end] = round_to(k, qkv.dtype).reshape(-1)
        if kv_cache is not None and slot_mapping is not None:
            slot = int(slot_mapping[t])
            if slot >= 0:
                page, off = divmod(slot, bs)
                for h in range(nkv):
                    ks, vs = _scale_at(k_scale, h, slot), _scale_at(v_scale, h, slot)
                    k_view[page, h, off] = round_to(k[h] / ks, kv_cache.dtype)
                    v_view[page, h, off] = round_to(v[h] / vs, kv_cache.dtype)
        if not index_branch:
            continue
        iq = norm_rope(row[v_end:iq_end].view(niq, di), index_q_norm_weight, pos)
        ik = norm_rope(row[iq_end:iq_end + di], index_k_norm_weight, pos)
        if index_q_out is not None:
            index_q_out[t].copy_(round_to(iq, index_q_out.dtype).reshape(index_q_out[t].shape))
        else:
            row[v_end:iq_end] = round_to(iq, qkv.dtype).reshape(-1)
        row[iq_end:iq_end + di] = round_to(ik, qkv.dtype)
        if index_cache is not None and index_slot_mapping is not None:
            slot = int(index_slot_mapping[t])
            if slot >= 0:
                page, off = divmod(slot, index_bs)
                index_cache[page, off] = round_to(ik, index_cache.dtype)
    return PreAttentionResult(qkv, kv_cache, index_cache, q_out, index_q_out)


# ---- query rows ----------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    """One query row: its request and absolute position (negative = padding)."""

    request: int
    position: int


def decode_rows(seq_lens: Tensor, query_len: int) -> list[Row]:
    """Row r of decode request i is row i * L + r at position seq_lens[i] - L + r (A8)."""
    return [
        Row(i, s - query_len + r) for i, s in enumerate(seq_lens.tolist()) for r in range(query_len)
    ]


def prefill_rows(cu_seqlens_q: Tensor, seq_lens: Tensor, num_rows: int) -> list[Row]:
    """Request b owns rows [cu[b], cu[b+1]) at positions seq_lens[b] - q_len_b + i; rows past
    cu[B] are padding."""
    cu = cu_seqlens_q.tolist()
    rows = []
    for b, s in enumerate(seq_lens.tolist()):
        q_len = cu[b + 1] - cu[b]
        rows += [Row(b, s - q_len + i) for i in range(q_len)]
    rows += [Row(-1, -1)] * (num_rows - len(rows))
    return rows


def _gather_tokens(cache: Tensor, block_table: Tensor, request: int, length: int) -> Tensor:
    """Tokens [0, length) of a request from a paged [num_blocks, bs, ...] cache."""
    bs = cache.shape[1]
    pages = block_table[request, : math.ceil(length / bs)].long()
    return cache[pages].flatten(0, 1)[:length]


# ---- indexer (A2-A4, A12) ------------------------------------------------------------------


def block_scores(
    index_q: Tensor, index_cache: Tensor, block_table: Tensor, seq_lens: Tensor, rows: list[Row]
) -> list[Tensor]:
    """Per row, [H_idx, visible_blocks] float64: S_h(p, b) = max over keys j <= p of block b
    of <iq_h(p), ik(j)>, NaN dot products counted as -1e30. Padding rows give [H_idx, 0]."""
    bs = index_cache.shape[1]
    out = []
    for t, row in enumerate(rows):
        if row.position < 0:
            out.append(torch.empty(index_q.shape[1], 0, dtype=torch.float64))
            continue
        length = min(row.position + 1, int(seq_lens[row.request]))
        keys = _gather_tokens(index_cache, block_table, row.request, length).to(torch.float64)
        s = index_q[t].to(torch.float64) @ keys.T  # [H, length]
        s = torch.nan_to_num(s, nan=NAN_SCORE)
        nvb = row.position // bs + 1
        padded = torch.full((s.shape[0], nvb * bs), -math.inf, dtype=torch.float64)
        padded[:, :length] = s.cpu()
        out.append(padded.view(s.shape[0], nvb, bs).amax(-1))
    return out


def select_blocks(
    scores: Tensor, topk: int, init_blocks: int = 0, local_blocks: int = 1
) -> list[int]:
    """Selection of A3 for one row and head: init blocks, then local blocks, then the highest
    scores, the lower id winning ties; min(topk, visible) ids in ascending order."""
    nvb = scores.shape[0]
    values = scores.tolist()

    def tier(b: int) -> int:
        if b < init_blocks:
            return 2
        return 1 if b >= nvb - local_blocks else 0

    ranked = sorted(range(nvb), key=lambda b: (-tier(b), -values[b], b))
    return sorted(ranked[: min(topk, nvb)])


def index_topk(
    index_q: Tensor,
    index_cache: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    rows: list[Row],
    *,
    topk: int = 16,
    capacity: int = 16,
    init_blocks: int = 0,
    local_blocks: int = 1,
) -> Tensor:
    """Top-k rows [H_idx, len(rows), capacity] int32: ascending ids, then -1 (A4)."""
    heads = index_q.shape[1]
    out = torch.full((heads, len(rows), capacity), -1, dtype=torch.int32)
    for t, s in enumerate(block_scores(index_q, index_cache, block_table, seq_lens, rows)):
        for h in range(heads):
            if s.shape[1] == 0:
                continue
            ids = select_blocks(s[h], topk, init_blocks, local_blocks)
            out[h, t, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
    return out


@mirrors(_ops.index_topk_decode)
def index_topk_decode(
    *, index_q: Tensor, index_cache: Tensor, block_table: Tensor, seq_lens: Tensor,
    query_len: int, topk: int, init_blocks: int, local_blocks: int, capacity: int = 16,
) -> Tensor:
    """Reference of ``msa.index_topk_decode``: the [H_idx, T, capacity] rows it writes."""
    rows = decode_rows(seq_lens, query_len)
    return index_topk(index_q, index_cache, block_table, seq_lens, rows, topk=topk,
                      capacity=capacity, init_blocks=init_blocks, local_blocks=local_blocks)


@mirrors(_ops.index_topk_prefill)
def index_topk_prefill(
    *, index_q: Tensor, index_cache: Tensor, block_table: Tensor, cu_seqlens_q: Tensor,
    seq_lens: Tensor, topk: int, init_blocks: int, local_blocks: int, capacity: int = 16,
) -> Tensor:
    """Reference of ``msa.index_topk_prefill``: the [H_idx, T, capacity] rows it writes."""
    rows = prefill_rows(cu_seqlens_q, seq_lens, index_q.shape[0])
    return index_topk(index_q, index_cache, block_table, seq_lens, rows, topk=topk,
                      capacity=capacity, init_blocks=init_blocks, local_blocks=local_blocks)


# ---- attention (A5) ------------------------------------------------------------------------


def attention(
    q: Tensor,
    kv_cache: Tensor,
    block_table: Tensor,
    seq_lens: Tensor,
    rows: list[Row],
    *,
    topk: Optional[Tensor] = None,
    softmax_scale: float = 0.0,
    k_scale: Optional[Tensor] = None,
    v_scale: Optional[Tensor] = None,
) -> tuple[Tensor, Tensor]:
    """Exact softmax attention of each row over keys j <= p, j < seq_len, restricted to the
    blocks of topk[g, t] (ids >= 0) when topk is given (sparse), else all of them (dense).

    Returns out [T, Hq, D] float64 and lse [T, Hq] float64 (natural log; -inf and zeros for
    rows without keys).
    """
    k_all, v_all = (x.cpu() for x in dequantized_kv(kv_cache, k_scale, v_scale))
    _, hkv, bs, d = k_all.shape
    t_rows, hq = q.shape[0], q.shape[1]
    group = hq // hkv
    scale = softmax_scale or d ** -0.5
    out = torch.zeros(t_rows, hq, d, dtype=torch.float64)
    lse = torch.full((t_rows, hq), -math.inf, dtype=torch.float64)
    for t, row in enumerate(rows):
        if row.position < 0:
            continue
        length = min(row.position + 1, int(seq_lens[row.request]))
        pages = block_table[row.request, : math.ceil(length / bs)].long().cpu()
        for g in range(hkv):
            keys = k_all[pages, g].flatten(0, 1)[:length]  # [length, D]
            values = v_all[pages, g].flatten(0, 1)[:length]
            mask = torch.ones(length, dtype=torch.bool)
            if topk is not None:
                chosen = [b for b in topk[g, t].tolist() if b >= 0]
                mask = torch.zeros(length, dtype=torch.bool)
                for b in chosen:
                    mask[b * bs : (b + 1) * bs] = True
            if not bool(mask.any()):
                continue
            qg = q[t, g * group : (g + 1) * group].to(torch.float64).cpu()  # [G, D]
            logits = scale * (qg @ keys[mask].T)
            out[t, g * group : (g + 1) * group] = torch.softmax(logits, -1) @ values[mask]
            lse[t, g * group : (g + 1) * group] = torch.logsumexp(logits, -1)
    return out, lse


@mirrors(_ops.sparse_attention_decode)
def sparse_attention_decode(
    *, q: Tensor, kv_cache: Tensor, block_table: Tensor, seq_lens: Tensor, topk: Tensor,
    query_len: int, softmax_scale: float, k_scale: Optional[Tensor], v_scale: Optional[Tensor],
) -> tuple[Tensor, Tensor]:
    """Reference of ``msa.sparse_attention_decode``: (out, lse) in float64."""
    rows = decode_rows(seq_lens, query_len)
    return attention(q, kv_cache, block_table, seq_lens, rows, topk=topk.cpu(),
                     softmax_scale=softmax_scale, k_scale=k_scale, v_scale=v_scale)


@mirrors(_ops.sparse_attention_prefill)
def sparse_attention_prefill(
    *, q: Tensor, kv_cache: Tensor, block_table: Tensor, cu_seqlens_q: Tensor,
    seq_lens: Tensor, topk: Tensor, softmax_scale: float, k_scale: Optional[Tensor],
    v_scale: Optional[Tensor],
) -> tuple[Tensor, Tensor]:
    """Reference of ``msa.sparse_attention_prefill``: (out, lse) in float64."""
    rows = prefill_rows(cu_seqlens_q, seq_lens, q.shape[0])
    return attention(q, kv_cache, block_table, seq_lens, rows, topk=topk.cpu(),
                     softmax_scale=softmax_scale, k_scale=k_scale, v_scale=v_scale)


@mirrors(_ops.dense_attention)
def dense_attention(
    *, q: Tensor, kv_cache: Tensor, block_table: Tensor, cu_seqlens_q: Tensor,
    seq_lens: Tensor, softmax_scale: float, k_scale: Optional[Tensor],
    v_scale: Optional[Tensor],
) -> tuple[Tensor, Tensor]:
    """Reference of ``msa.dense_attention``: (out, lse) in float64."""
    rows = prefill_rows(cu_seqlens_q, seq_lens, q.shape[0])
    return attention(q, kv_cache, block_table, seq_lens, rows, softmax_scale=softmax_scale,
                     k_scale=k_scale, v_scale=v_scale)


# ---- page-16 sparse table (A10) ------------------------------------------------------------


@mirrors(_ops.sparse_page16)
def sparse_page16(
    *, topk: Tensor, block_table: Tensor, seq_lens: Tensor, query_len: int, page_stride: int,
    block_size: int,
) -> tuple[Tensor, Tensor]:
    """Reference of ``msa.sparse_page16``: (table [T * Hkv, K * bs / 16], context_lens
    [T * Hkv]) int32."""
    hkv, _, k = topk.shape
    per_block = block_size // 16
    rows = decode_rows(seq_lens, query_len)
    table = torch.zeros(len(rows) * hkv, k * per_block, dtype=torch.int32)
    ctx = torch.zeros(len(rows) * hkv, dtype=torch.int32)
    for t, row in enumerate(rows):
        if row.position < 0:
            continue
        own = row.position // block_size
        for h in range(hkv):
            ids = [b for b in topk[h, t].tolist() if b >= 0]
            entries = [
                (int(block_table[row.request, b]) * page_stride + j) * hkv + h
                for b in ids
                for j in range(per_block)
            ]
            table[t * hkv + h, : len(entries)] = torch.tensor(entries, dtype=torch.int32)
            if own in ids:
                n_full = len(ids) - 1
                ctx[t * hkv + h] = n_full * block_size + (row.position + 1 - block_size * own)
            else:
                ctx[t * hkv + h] = min(len(ids) * block_size, row.position + 1)
    return table, ctx


# ---- batch metadata (A8) -------------------------------------------------------------------


@dataclasses.dataclass
class BatchMetadata:
    query_start_loc: Tensor  # [B + 1]
    prefill_cu_seqlens_q: Tensor  # [B - nd + 1]
    prefill_cu_seqlens_k: Tensor  # [B - nd + 1]
    context_lens: Tensor  # [B]
    kv_block_counts: Tensor  # [B]
    token_request: Tensor  # [max_tokens]
    token_position: Tensor  # [max_tokens]
    slot_mapping: Tensor  # [max_tokens] int64
    index_slot_mapping: Optional[Tensor]  # [max_tokens] int64
    totals: Tensor  # [4]: decode tokens, prefill tokens, tokens, prefill requests' kv blocks


@mirrors(_ops.batch_metadata)
def batch_metadata(
    *, query_lens: Tensor, seq_lens: Tensor, block_table: Tensor, num_decode_requests: int,
    decode_query_len: int, block_size: int, max_tokens: int,
    index_block_table: Optional[Tensor],
) -> BatchMetadata:
    """Reference of ``msa.batch_metadata`` with per-token outputs of length max_tokens."""
    q_lens, s_lens = query_lens.tolist(), seq_lens.tolist()
    nd, dl = num_decode_requests, decode_query_len
    rows_per_request = [dl] * nd + q_lens[nd:]
    starts = [0]
    for n in rows_per_request:
        starts.append(starts[-1] + n)
    cu_q, cu_k = [0], [0]
    for q_len, s_len in zip(q_lens[nd:], s_lens[nd:]):
        cu_q.append(cu_q[-1] + q_len)
        cu_k.append(cu_k[-1] + s_len)
    request = [-1] * max_tokens
    position = [-1] * max_tokens
    slots = [-1] * max_tokens
    index_slots = [-1] * max_tokens
    for b, n in enumerate(rows_per_request):
        first = s_lens[b] - n
        for i in range(n):
            t, p = starts[b] + i, first + i
            request[t], position[t] = b, p
            if p >= 0:
                slots[t] = int(block_table[b, p // block_size]) * block_size + p % block_size
                if index_block_table is not None:
                    page = int(index_block_table[b, p // block_size])
                    index_slots[t] = page * block_size + p % block_size
    blocks = [math.ceil(s / block_size) for s in s_lens]
    i32 = torch.int32
    return BatchMetadata(
        query_start_loc=torch.tensor(starts, dtype=i32),
        prefill_cu_seqlens_q=torch.tensor(cu_q, dtype=i32),
        prefill_cu_seqlens_k=torch.tensor(cu_k, dtype=i32),
        context_lens=torch.tensor([s - q for s, q in zip(s_lens, q_lens)], dtype=i32),
        kv_block_counts=torch.tensor(blocks, dtype=i32),
        token_request=torch.tensor(request, dtype=i32),
        token_position=torch.tensor(position, dtype=i32),
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        index_slot_mapping=(
            torch.tensor(index_slots, dtype=torch.int64) if index_block_table is not None else None
        ),
        totals=torch.tensor(
            [nd * dl, sum(q_lens[nd:]), nd * dl + sum(q_lens[nd:]), sum(blocks[nd:])], dtype=i32
        ),
    )


# ---- cross-layer top-k reuse (A9) ----------------------------------------------------------


def recomputes_topk(sparse_ordinal: int, freq: int, offset: int = 0) -> bool:
    """Whether sparse layer ordinal o recomputes its top-k: max(o - offset, 0) % freq == 0."""
    return max(sparse_ordinal - offset, 0) % freq == 0
