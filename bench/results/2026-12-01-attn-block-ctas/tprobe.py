"""Probe: the incumbent's split-K sparse decode design (spec B3.3: one program per (row, chunk of
the top-k list), chunk count pow2floor(min(K, 256 // rows)), then an LSE merge kernel), written
in Triton here, timed in decode_bench.py's harness (graph replay, 256 MiB read before each replay,
events) on decode_bench's own inputs, next to msa.sparse_attention_decode. Question: is the
incumbent's 8.9 us at 8K x 1 reachable in our harness, and by which structure?

Run from the repository root with msa installed:
    python3 bench/results/2026-12-01-attn-block-ctas/tprobe.py
"""

from __future__ import annotations

import os
import sys

import torch
import triton
import triton.language as tl

_here = os.path.dirname(os.path.abspath(__file__))
while not os.path.exists(os.path.join(_here, "bench", "decode_bench.py")):
    _here = os.path.dirname(_here)  # up to the repository root (run from a copy in .scratch/ too)
sys.path.insert(0, os.path.join(_here, "bench"))
import decode_bench as db  # noqa: E402

import msa  # noqa: E402


@triton.jit
def split_kernel(q_ptr, kv_ptr, bt_ptr, sl_ptr, tk_ptr, po_ptr, pl_ptr, T, bt_stride, tk_stride,
                 kv_stride_page, scale_log2, QLEN: tl.constexpr, PER: tl.constexpr,
                 K: tl.constexpr, H: tl.constexpr, D: tl.constexpr, BS: tl.constexpr,
                 PDL: tl.constexpr):
    t = tl.program_id(0)
    c = tl.program_id(1)
    req = t // QLEN
    seq = tl.load(sl_ptr + req)
    pos = seq - QLEN + t % QLEN
    oh = tl.arange(0, H)
    od = tl.arange(0, D)
    on = tl.arange(0, BS)
    q = tl.load(q_ptr + t * H * D + oh[:, None] * D + od[None, :])
    m = tl.full([H], float("-inf"), tl.float32)
    l_sum = tl.zeros([H], tl.float32)
    acc = tl.zeros([H, D], tl.float32)
    for i in range(PER):
        e = c * PER + i
        blk = tl.load(tk_ptr + t * tk_stride + e, mask=e < K, other=-1)
        valid = blk >= 0
        page = tl.load(bt_ptr + req * bt_stride + blk, mask=valid, other=0).to(tl.int64)
        base = kv_ptr + page * kv_stride_page
        k = tl.load(base + on[:, None] * (2 * D) + od[None, :])
        v = tl.load(base + on[:, None] * (2 * D) + D + od[None, :])
        s = tl.dot(q, tl.trans(k)) * scale_log2
        tok = blk * BS + on
        s = tl.where(((tok <= pos) & valid)[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m - m_use)
        l_sum = l_sum * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    lse = tl.where(l_sum > 0, m + tl.log2(l_sum), float("-inf"))
    o = acc / tl.where(l_sum > 0, l_sum, 1.0)[:, None]
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    tl.store(po_ptr + ((c * T + t) * H + oh[:, None]) * D + od[None, :], o)
    tl.store(pl_ptr + (c * T + t) * H + oh, lse)


@triton.jit
def merge_kernel(po_ptr, pl_ptr, out_ptr, T, H, NCH: tl.constexpr, D: tl.constexpr,
                 PDL: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    if PDL:
        tl.extra.cuda.gdc_wait()
    oc = tl.arange(0, NCH)
    od = tl.arange(0, D)
    lse = tl.load(pl_ptr + (oc * T + t) * H + h)
    mx = tl.max(lse, 0)
    w = tl.where(lse == float("-inf"), 0.0, tl.exp2(lse - mx))
    o = tl.load(po_ptr + ((oc[:, None] * T + t) * H + h) * D + od[None, :])
    out = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
    tl.store(out_ptr + (t * H + h) * D + od, out.to(out_ptr.dtype.element_ty))


@triton.jit
def empty_kernel(x_ptr):
    pass


def pow2floor(x: int) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def make_incumbent(cfg, num_warps: int, num_stages: int, pdl: bool, chunks: int = 0):
    g = cfg.g
    t = cfg.t
    nch = chunks or pow2floor(max(1, min(db.TOPK, 256 // (t * db.HKV))))
    per = (db.TOPK + nch - 1) // nch
    po = torch.empty(nch, t, db.HQ, db.D, dtype=torch.float32, device="cuda")
    pl = torch.empty(nch, t, db.HQ, dtype=torch.float32, device="cuda")
    out = torch.empty(t, db.HQ, db.D, dtype=torch.bfloat16, device="cuda")
    tk = cfg.topk[0]
    scale_log2 = (db.D ** -0.5) * 1.4426950408889634
    extra = {"launch_pdl": True} if pdl else {}

    def fn() -> None:
        split_kernel[(t, nch)](cfg.q, g.kv, g.block_table, cfg.seq_lens, tk, po, pl, t,
                               g.block_table.stride(0), tk.stride(0), g.kv.stride(0), scale_log2,
                               QLEN=cfg.qlen, PER=per, K=db.TOPK, H=db.HQ, D=db.D, BS=db.BS,
                               PDL=pdl, num_warps=num_warps, num_stages=num_stages)
        merge_kernel[(t, db.HQ)](po, pl, out, t, db.HQ, NCH=nch, D=db.D, PDL=pdl, num_warps=4,
                                 **extra)

    return fn, out, nch


def main() -> int:
    timer = db.Timer("cuda", 30, 5, "read")
    x = torch.zeros(1, device="cuda")

    def empty16() -> None:
        empty_kernel[(16,)](x, num_warps=4)

    def empty132() -> None:
        empty_kernel[(132,)](x, num_warps=4)

    def empty2() -> None:
        empty_kernel[(16,)](x, num_warps=4)
        empty_kernel[(16,)](x, num_warps=4)

    for name, f in (("empty16", empty16), ("empty132", empty132), ("empty16 x2", empty2)):
        print(f"{name:>40}: {timer.measure(f)['median_us']:6.1f} us", flush=True)
    shapes = [(8192, 1), (8192, 16), (8192, 64), (32768, 1), (131072, 1), (131072, 16)]
    for ctx, batch in shapes:
        g = db.Group(ctx, batch, "bf16", "cuda", 1234 + ctx // db.BS + 1000 * batch)
        cfg = db.Config(g, 1, False, 99, msa)
        for _ in range(2):
            cfg.stages["step"]()
        torch.cuda.synchronize()
        ours = timer.measure(cfg.stages["attn"])["median_us"]
        print(f"ctx {ctx:6d} B {batch:2d}: msa attn {ours:6.1f} us", flush=True)
        variants = [(4, 1, False, 0), (8, 1, False, 0), (4, 2, False, 0), (4, 1, True, 0),
                    (8, 1, True, 0)]
        if batch == 1:
            variants += [(4, 1, True, 8), (8, 1, True, 4)]
        for nw, ns, pdl, ch in variants:
            tag = f"triton w{nw} s{ns} pdl{int(pdl)} ch{ch or 'auto'}"
            try:
                fn, out, nch = make_incumbent(cfg, nw, ns, pdl, ch)
                fn()
                torch.cuda.synchronize()
                ref = cfg.out.float()
                err = (out.float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-6)
                ms = timer.measure(fn)
                print(f"ctx {ctx:6d} B {batch:2d}: {tag:>28} (chunks {nch:2d}) "
                      f"{ms['median_us']:6.1f} us  rel.err {err:.2e} mode {ms['mode']}",
                      flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"ctx {ctx:6d} B {batch:2d}: {tag}: {type(e).__name__}: {str(e)[:300]}",
                      flush=True)
        del cfg, g
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
