"""How an engine's attention backend drives the msa ops for one mixed decode + prefill step
across several sparse layers with cross-layer top-k reuse (spec A8, A9, A11).

Per step: buffers come from declared capacities (allocated once, graph-capture friendly), the
batch metadata is built on the device, and every sparse layer runs
  fused pre-attention op (SPARSE on recomputing layers, SKIP_INDEX on reusing ones)
  -> index top-k for decode rows and prefill rows into one shared buffer (recomputing layers)
  -> sparse attention for decode rows and prefill rows.
Everything is checked against msa.reference; prints a verdict and exits 1 on a mismatch.

    python examples/engine_integration.py --device cpu
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

import msa
from msa import reference as ref

HQ, HKV, D = 16, 1, 128  # one MiniMax-M3 TP4 rank: 16 q heads, 1 KV head, 1 index head
BLOCK, TOPK = 128, 16


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--layers", type=int, default=4, help="sparse layers")
    parser.add_argument("--topk-freq", type=int, default=2, help="index_topk_freq (A9)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    device = args.device
    gen = torch.Generator().manual_seed(args.seed)

    # ---- once, at engine start: capacities, per-step buffers, per-layer caches, RoPE table.
    decode_len = 2  # 1 + one speculative token
    caps = msa.Capacities(max_requests=5, max_tokens=256, max_context=4096,
                          max_decode_query_len=decode_len, num_q_heads=HQ, num_kv_heads=HKV,
                          num_index_heads=HKV)
    bufs = msa.allocate_buffers(caps, device)
    caches = [msa.allocate_caches(caps, device) for _ in range(args.layers)]
    cos_sin = msa.make_rope_cache(caps.max_context, caps.rotary_dim, device=device)
    weights = [
        [torch.randn(D, generator=gen).mul(0.1).to(torch.bfloat16).to(device) for _ in range(4)]
        for _ in range(args.layers)
    ]

    # ---- the step's batch: decodes first (one padded), then prefills (one with a prefix).
    query_lens = [decode_len, decode_len, 0, 150, 60]
    seq_lens = [3000, 2200, 0, 150, 2060]
    nd = 3
    num_requests = len(query_lens)
    mb = caps.max_blocks_per_request
    pages = torch.randperm(caps.cache_blocks, generator=gen)
    block_table = pages[: num_requests * mb].view(num_requests, mb).to(torch.int32).to(device)
    index_pages = torch.randperm(caps.cache_blocks, generator=gen)
    index_table = index_pages[: num_requests * mb].view(num_requests, mb).to(torch.int32)
    index_table = index_table.to(device)
    # Earlier steps filled the caches up to each request's cached prefix.
    for kv, index in caches:
        kv.copy_(torch.randn(kv.shape, generator=gen).to(kv.dtype))
        index.copy_(torch.randn(index.shape, generator=gen).to(index.dtype))
    ref_caches = [(kv.clone(), index.clone()) for kv, index in caches]

    i32 = dict(dtype=torch.int32, device=device)
    msa.batch_metadata(
        query_lens=torch.tensor(query_lens, **i32), seq_lens=torch.tensor(seq_lens, **i32),
        block_table=block_table, index_block_table=index_table, num_decode_requests=nd,
        decode_query_len=decode_len, query_start_loc=bufs.query_start_loc[: num_requests + 1],
        prefill_cu_seqlens_q=bufs.prefill_cu_seqlens_q[: num_requests - nd + 1],
        token_position=bufs.token_position, slot_mapping=bufs.slot_mapping,
        index_slot_mapping=bufs.index_slot_mapping, totals=bufs.totals,
        error_flags=bufs.error_flags, workspace=bufs.workspace)
    # Host-side counts come from the engine's own host copies, never from the device.
    t_dec = nd * decode_len
    t = t_dec + sum(query_lens[nd:])
    lens = torch.tensor(seq_lens, **i32)
    dec_lens, pre_lens = lens[:nd], lens[nd:]
    dec_table, pre_table = block_table[:nd], block_table[nd:]
    dec_index_table, pre_index_table = index_table[:nd], index_table[nd:]
    cu_q = bufs.prefill_cu_seqlens_q[: num_requests - nd + 1]

    want_meta = ref.batch_metadata(
        query_lens=torch.tensor(query_lens, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32), block_table=block_table.cpu(),
        index_block_table=index_table.cpu(), num_decode_requests=nd, decode_query_len=decode_len,
        max_tokens=caps.max_tokens)
    failures = []
    if not torch.equal(bufs.slot_mapping.cpu(), want_meta.slot_mapping):
        failures.append("slot_mapping")

    width = caps.qkv_width
    for layer in range(args.layers):
        recompute = ref.recomputes_topk(layer, args.topk_freq)
        mode = msa.PreAttentionMode.SPARSE if recompute else msa.PreAttentionMode.SKIP_INDEX
        qkv = torch.randn(t, width, generator=gen).mul(2).to(torch.bfloat16).to(device)
        qn, kn, iqn, ikn = weights[layer]
        kv, index = caches[layer]
        fused = dict(
            positions=bufs.token_position[:t], cos_sin_cache=cos_sin, q_norm_weight=qn,
            k_norm_weight=kn, index_q_norm_weight=iqn, index_k_norm_weight=ikn,
            num_q_heads=HQ, num_kv_heads=HKV, num_index_heads=HKV, mode=mode.name,
            slot_mapping=bufs.slot_mapping[:t], q_out=bufs.q[:t])
        if recompute:  # the index branch: index_q out, index_k into this layer's index cache
            fused.update(index_slot_mapping=bufs.index_slot_mapping[:t],
                         index_q_out=bufs.index_q[:t])
        want = ref.fused_qknorm_rope(
            qkv=qkv, kv_cache=ref_caches[layer][0],
            index_cache=ref_caches[layer][1] if recompute else None, **fused)
        if recompute:
            ref_caches[layer] = (want.kv_cache, want.index_cache)
        msa.fused_qknorm_rope(qkv=qkv, kv_cache=kv, index_cache=index if recompute else None,
                              error_flags=bufs.error_flags, workspace=bufs.workspace, **fused)

        q, iq = bufs.q[:t], bufs.index_q[:t]
        if recompute:
            msa.index_topk_decode(index_q=iq[:t_dec], index_cache=index,
                                  block_table=dec_index_table, seq_lens=dec_lens,
                                  topk_out=bufs.topk, query_len=decode_len,
                                  error_flags=bufs.error_flags, workspace=bufs.workspace)
            msa.index_topk_prefill(index_q=iq[t_dec:], index_cache=index,
                                   block_table=pre_index_table, cu_seqlens_q=cu_q,
                                   seq_lens=pre_lens, topk_out=bufs.topk[:, t_dec:],
                                   error_flags=bufs.error_flags, workspace=bufs.workspace)
            rows = (ref.decode_rows(dec_lens.cpu(), decode_len)
                    + [ref.Row(r.request + nd, r.position)
                       for r in ref.prefill_rows(cu_q.cpu(), pre_lens.cpu(), t - t_dec)])
            scores = ref.block_scores(iq, index, index_table, lens, rows)
            want_topk = ref.index_topk(iq, index, index_table, lens, rows)
            if not topk_matches(bufs.topk[:, :t].cpu(), want_topk, scores):
                failures.append(f"layer {layer}: top-k")

        out = bufs.attn_out
        msa.sparse_attention_decode(q=q[:t_dec], kv_cache=kv, block_table=dec_table,
                                    seq_lens=dec_lens, topk=bufs.topk, out=out[:t_dec],
                                    query_len=decode_len, error_flags=bufs.error_flags,
                                    workspace=bufs.workspace)
        msa.sparse_attention_prefill(q=q[t_dec:], kv_cache=kv, block_table=pre_table,
                                     cu_seqlens_q=cu_q, seq_lens=pre_lens,
                                     topk=bufs.topk[:, t_dec:], out=out[t_dec:t],
                                     error_flags=bufs.error_flags, workspace=bufs.workspace)
        want_dec, _ = ref.sparse_attention_decode(
            q=q[:t_dec], kv_cache=want.kv_cache, block_table=dec_table, seq_lens=dec_lens,
            topk=bufs.topk[:, :t_dec], query_len=decode_len)
        want_pre, _ = ref.sparse_attention_prefill(
            q=q[t_dec:], kv_cache=want.kv_cache, block_table=pre_table, cu_seqlens_q=cu_q,
            seq_lens=pre_lens, topk=bufs.topk[:, t_dec:t])
        # bf16 outputs and caches: within 2e-2 absolute plus 2e-2 relative of the reference.
        err = max(excess(out[:t_dec], want_dec), excess(out[t_dec:t], want_pre))
        cache_err = excess(kv, want.kv_cache)
        print(f"layer {layer} ({'recompute' if recompute else 'reuse'} top-k): "
              f"max |out - ref| - 2e-2 |ref| = {err:.2e}, same for the KV cache {cache_err:.2e}")
        if not math.isfinite(err) or err > 2e-2 or cache_err > 2e-2:
            failures.append(f"layer {layer}: attention or cache")

    if int(bufs.error_flags.item()) != 0:
        failures.append(f"error_flags = {int(bufs.error_flags.item())}")
    if failures:
        print("MISMATCH: " + "; ".join(failures))
        return 1
    print(f"OK: {args.layers} sparse layers, {t_dec} decode + {t - t_dec} prefill rows on "
          f"{device} match msa.reference")
    return 0


def excess(got: torch.Tensor, want: torch.Tensor) -> float:
    """max(|got - want| - 2e-2 |want|) in float64."""
    got, want = got.cpu().double(), want.cpu().double()
    return ((got - want).abs() - 2e-2 * want.abs()).max().item()


def topk_matches(got: torch.Tensor, want: torch.Tensor, scores: list[torch.Tensor]) -> bool:
    """Equal to the reference, up to exchanges of blocks tied within 1e-3 at the boundary."""
    for t, s in enumerate(scores):
        g, w = got[0, t].tolist(), want[0, t].tolist()
        if g == w:
            continue
        ids = [b for b in g if b >= 0]
        if len(ids) != len([b for b in w if b >= 0]) or s.shape[1] - 1 not in ids:
            return False
        rest = [b for b in range(s.shape[1]) if b not in ids]
        chosen = [b for b in ids if b != s.shape[1] - 1]
        if rest and chosen and min(s[0, chosen]) < max(s[0, rest]) - 1e-3:
            return False
    return True


if __name__ == "__main__":
    sys.exit(main())
