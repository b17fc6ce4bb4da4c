#!/usr/bin/env python3
"""Prefill at the tensor-core roofline: one MiniMax-M3 attention layer's prefill, stage by stage,
against the card's matmul ceiling and PyTorch's fastest SDPA, in one process on the same inputs.

Shapes: TP4 rank (Hq 16, Hkv 1, H_idx 1, head_dim 128, index_dim 128, block = page = 128 tokens,
top-16). Cases: single prompts of 4K, 16K, 64K and 128K tokens, an 8K chunk after a 120K prefix,
and a batch of 8 prompts of 2K-32K. Cache dtypes: bf16, and fp8 (e4m3 KV with per-layer scales,
e4m3 index keys and queries).

Stages (each a CUDA graph of one op call, median of several replays, CUDA events):
  insert  msa.fused_qknorm_rope (q/k/index norm + RoPE, KV and index-K inserts of the new tokens)
  index   msa.index_topk_prefill (block scores + top-16)
  sparse  msa.sparse_attention_prefill over the index stage's top-k
  dense   msa.dense_attention (layers 0-2)
Stages run with the library's default kernel choice (the tensor-core kernels wherever they are
the faster, docs/api.md; --kernels tc forces them everywhere, as MSA_CUDA_PREFILL=tc does); each
of index / sparse / dense also runs with MSA_CUDA_PREFILL=simt ("prev": the CUDA-core kernels)
where that should take at most --prev-max-seconds.

Useful TFLOP/s counts only the causal, visible work: index 2 * 128 per visible key per row;
sparse 4 * 128 * 16 per visible key in the row's selected blocks; dense 4 * 128 * 16 per visible
key. Peers, same process: torch SDPA (flash and cuDNN backends, causal lower-right, GQA, over
contiguous K/V copies of the cache) for dense; a cuBLAS bf16 matmul 8192^3 (and torch._scaled_mm
in e4m3) as the card's tensor-core ceilings. "union/8 tok" is the mean count of distinct blocks
that 8 consecutive tokens select (the blocks a sparse tile of 8 tokens x 16 heads loads, 16 to
128): the inputs are random, so their top-k share little and this is the sparse kernel's worst
case; a trained indexer's neighbouring tokens share most of their blocks.

Every case is checked before it is timed: sampled top-k rows against fp32 block scores, sampled
attention rows (sparse and dense) against an fp32 softmax. Writes prefill.json and prefill.md
to --out and prints the table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_bench import QKV_WIDTH, fill_normal_, git_commit  # noqa: E402

HQ, HKV, HIDX, D, DI, BS, TOPK, ROT = 16, 1, 1, 128, 128, 128, 16, 64
FP8_SCALE = 0.0625
CHECK_RTOL = 2e-2
# Useful TFLOP/s of the previous (CUDA-core) kernels on an H100 at 6a9b1ee, for the time budget.
PREV_RATE = {"index": 50e12, "sparse": 90e12, "dense": 11e12}

CASES = {
    # name: list of (prefix, new tokens) per request
    "4K": [(0, 4096)],
    "16K": [(0, 16384)],
    "64K": [(0, 65536)],
    "128K": [(0, 131072)],
    "8K+120K": [(122880, 8192)],
    "8x2K-32K": [(0, n) for n in (2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768)],
}
DTYPES = {"bf16": (torch.bfloat16, torch.bfloat16), "fp8": (torch.float8_e4m3fn, torch.float8_e4m3fn)}


def log(*a: object) -> None:
    print(*a, flush=True)


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help="comma list of " + ", ".join(CASES))
    p.add_argument("--dtypes", default="bf16,fp8")
    p.add_argument("--iters", type=int, default=10, help="timed replays per stage (at most)")
    p.add_argument("--seconds", type=float, default=1.5, help="time budget per stage")
    p.add_argument("--prev-max-seconds", type=float, default=0.4,
                   help="time the previous kernels only where a call should take at most this "
                   "long (from the work and their rates measured at 6a9b1ee)")
    p.add_argument("--kernels", choices=["default", "tc"], default="default",
                   help="the stages' kernel choice: the library's default, or the tensor-core "
                   "kernels wherever they apply (MSA_CUDA_PREFILL=tc)")
    p.add_argument("--out", default="bench/results/prefill-latest")
    p.add_argument("--skip-peers", action="store_true")
    p.add_argument("--shared-blocks", action="store_true",
                   help="index keys of each block lean by a per-block amount along one direction "
                   "that every index query shares, so neighbouring tokens select mostly the same "
                   "blocks, as a trained indexer's do (default: independent random selections)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------- timing


def time_call(fn: Callable[[], Any], iters: int, seconds: float) -> dict:
    """Median of graph replays of fn (eager if capture fails), CUDA events around each."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    mode = "graph"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        call = graph.replay
    except Exception as e:  # noqa: BLE001
        log(f"  graph capture failed ({type(e).__name__}: {str(e)[:120]}); eager")
        torch.cuda.synchronize()
        call, mode = fn, "eager"
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    call()
    e.record()
    torch.cuda.synchronize()
    first = s.elapsed_time(e) * 1e-3
    n = max(3, min(iters, int(seconds / max(first, 1e-6))))
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        call()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return {"median_us": statistics.median(ts), "min_us": min(ts), "n": n, "mode": mode}


def set_kernels(choice: str) -> None:
    """MSA_CUDA_PREFILL for the stages: unset for the library's default, else the choice."""
    if choice == "default":
        os.environ.pop("MSA_CUDA_PREFILL", None)
    else:
        os.environ["MSA_CUDA_PREFILL"] = choice


KERNELS = ["default"]  # the stages' choice (--kernels), restored after each "prev" call


def with_prev(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> None:
        os.environ["MSA_CUDA_PREFILL"] = "simt"
        try:
            fn()
        finally:
            set_kernels(KERNELS[0])
    return run


# ---------------------------------------------------------------------------- one case


class Case:
    def __init__(self, name: str, dtype_name: str, msa: Any, seed: int = 1) -> None:
        self.name, self.dtype_name = name, dtype_name
        reqs = CASES[name]
        self.kv_dtype, self.index_dtype = DTYPES[dtype_name]
        dev = "cuda"
        self.prefix = [p for p, _ in reqs]
        self.new = [n for _, n in reqs]
        self.lens = [p + n for p, n in reqs]
        self.nb = [math.ceil(s / BS) for s in self.lens]
        self.B = len(reqs)
        self.T = sum(self.new)
        mb = max(self.nb)
        pages = sum(self.nb)
        torch.manual_seed(seed)
        fp8 = self.kv_dtype == torch.float8_e4m3fn
        self.kv = torch.empty(pages, HKV, BS, 2 * D, dtype=self.kv_dtype, device=dev)
        self.index = torch.empty(pages, BS, DI, dtype=self.index_dtype, device=dev)
        fill_normal_(self.kv, 1.0 / FP8_SCALE if fp8 else 1.0)
        fill_normal_(self.index, 1.0)
        self.k_scale = self.v_scale = None
        if fp8:
            self.k_scale = torch.full((1,), FP8_SCALE, dtype=torch.float32, device=dev)
            self.v_scale = torch.full((1,), FP8_SCALE, dtype=torch.float32, device=dev)
        bt = torch.zeros(self.B, mb, dtype=torch.int32)
        first = 0
        for b, n in enumerate(self.nb):
            bt[b, :n] = torch.arange(first, first + n, dtype=torch.int32)
            first += n
        self.page0 = [int(bt[b, 0]) for b in range(self.B)]
        self.block_table = bt.to(dev)
        cu = [0]
        for n in self.new:
            cu.append(cu[-1] + n)
        self.cu_host = cu
        self.cu = torch.tensor(cu, dtype=torch.int32, device=dev)
        self.seq_lens = torch.tensor(self.lens, dtype=torch.int32, device=dev)
        pos, slots = [], []
        for b in range(self.B):
            for i in range(self.new[b]):
                p = self.prefix[b] + i
                pos.append(p)
                slots.append((self.page0[b] + p // BS) * BS + p % BS)
        self.pos_host = pos
        self.positions = torch.tensor(pos, dtype=torch.int64, device=dev)
        self.slots = torch.tensor(slots, dtype=torch.int64, device=dev)
        self.qkv = torch.randn(self.T, QKV_WIDTH, device=dev).to(torch.bfloat16)
        self.q = torch.randn(self.T, HQ, D, device=dev).to(torch.bfloat16)
        self.index_q = torch.empty(self.T, HIDX, DI, dtype=self.index_dtype, device=dev)
        fill_normal_(self.index_q, 1.0)
        self.topk = torch.full((HIDX, self.T, TOPK), -1, dtype=torch.int32, device=dev)
        self.out_sparse = torch.empty(self.T, HQ, D, dtype=torch.bfloat16, device=dev)
        self.out_dense = torch.empty(self.T, HQ, D, dtype=torch.bfloat16, device=dev)
        self.flags = torch.zeros(1, dtype=torch.int32, device=dev)
        caps = msa.Capacities(max_requests=self.B, max_tokens=self.T, max_context=max(self.lens),
                              num_blocks=pages)
        nbytes = msa.workspace_bytes(caps, dev, dtype=torch.bfloat16,
                                     kv_cache_dtype=self.kv_dtype, index_dtype=self.index_dtype)
        self.workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=dev)
        self.cos_sin = msa.make_rope_cache(max(self.lens), ROT, device=dev)
        self.norm_w = [0.1 * torch.randn(n, device=dev) for n in (D, D, DI, DI)]
        self.msa = msa

    # Work counts (useful FLOPs).
    def index_flop(self) -> float:
        return 2.0 * DI * sum(p + 1 for p in self.pos_host) * HIDX

    def dense_flop(self) -> float:
        return 4.0 * D * HQ * sum(p + 1 for p in self.pos_host)

    def sparse_flop(self) -> float:
        tk = self.topk[0].long().cpu()
        pos = torch.tensor(self.pos_host, dtype=torch.long)
        valid = tk >= 0
        own = (pos // BS)[:, None]
        keys = torch.clamp(pos[:, None] + 1 - tk * BS, 0, BS)
        keys = torch.where(valid & (tk <= own), keys, torch.zeros_like(keys))
        return 4.0 * D * HQ * float(keys.sum())

    def union_blocks(self, tokens: int = 8) -> float:
        """Mean count of distinct blocks selected by `tokens` consecutive tokens of a request: the
        blocks a sparse tile of that many tokens loads, against TOPK per token."""
        tk = self.topk[0].long().cpu()
        counts = []
        for b in range(self.B):
            rows = tk[self.cu_host[b]:self.cu_host[b + 1]]
            n = rows.shape[0] // tokens * tokens
            if n == 0:
                continue
            tiles = rows[:n].reshape(-1, tokens * TOPK).sort(dim=1).values
            distinct = (tiles[:, 1:] != tiles[:, :-1]) & (tiles[:, 1:] >= 0)
            counts.append(distinct.sum(dim=1) + (tiles[:, 0] >= 0).long())
        return float(torch.cat(counts).double().mean()) if counts else 0.0

    def lean_index(self) -> None:
        """--shared-blocks: after the insert, every index key of a block leans along one direction
        u by a per-block amount up to 50, and every index query by 2 along u: q.k gains up to 100
        against noise of std ~11 (128 dims), so each token's top-k is mostly the most-leaning
        blocks it sees, shared with its neighbours."""
        dev = self.index.device
        u = torch.nn.functional.normalize(torch.randn(DI, device=dev), dim=0)
        lean = 50.0 * torch.rand(self.index.shape[0], 1, 1, device=dev)
        self.index.copy_((self.index.float() + lean * u).to(self.index_dtype))
        self.index_q.copy_((self.index_q.float() + 2.0 * u).to(self.index_dtype))

    # Stages.
    def insert(self) -> None:
        qn, kn, iqn, ikn = self.norm_w
        m = self.msa
        m.fused_qknorm_rope(
            qkv=self.qkv, positions=self.positions, cos_sin_cache=self.cos_sin, q_norm_weight=qn,
            k_norm_weight=kn, num_q_heads=HQ, num_kv_heads=HKV, mode=m.PreAttentionMode.SPARSE,
            num_index_heads=HIDX, rotary_dim=ROT, index_q_norm_weight=iqn,
            index_k_norm_weight=ikn, slot_mapping=self.slots, kv_cache=self.kv,
            k_scale=self.k_scale, v_scale=self.v_scale, index_cache=self.index,
            error_flags=self.flags, workspace=self.workspace)

    def index_stage(self) -> None:
        self.msa.index_topk_prefill(
            index_q=self.index_q, index_cache=self.index, block_table=self.block_table,
            cu_seqlens_q=self.cu, seq_lens=self.seq_lens, topk_out=self.topk, topk=TOPK,
            error_flags=self.flags, workspace=self.workspace)

    def sparse_stage(self) -> None:
        self.msa.sparse_attention_prefill(
            q=self.q, kv_cache=self.kv, block_table=self.block_table, cu_seqlens_q=self.cu,
            seq_lens=self.seq_lens, topk=self.topk, out=self.out_sparse, k_scale=self.k_scale,
            v_scale=self.v_scale, error_flags=self.flags, workspace=self.workspace)

    def dense_stage(self) -> None:
        self.msa.dense_attention(
            q=self.q, kv_cache=self.kv, block_table=self.block_table, cu_seqlens_q=self.cu,
            seq_lens=self.seq_lens, out=self.out_dense, k_scale=self.k_scale,
            v_scale=self.v_scale, error_flags=self.flags, workspace=self.workspace)

    # Dense per-request K/V (dequantised) for checks and the SDPA peer.
    def kv_of(self, b: int) -> tuple:
        pages = self.block_table[b, : self.nb[b]].long()
        kv = self.kv[pages, 0].reshape(-1, 2 * D)[: self.lens[b]]
        k, v = kv[:, :D], kv[:, D:]
        if self.kv_dtype == torch.float8_e4m3fn:
            k = (k.float() * FP8_SCALE).to(torch.bfloat16)
            v = (v.float() * FP8_SCALE).to(torch.bfloat16)
        return k, v

    def check(self) -> dict:
        """Sampled rows: top-k against fp32 block scores, sparse and dense attention against an
        fp32 softmax."""
        worst_s = worst_d = 0.0
        topk_fail = []
        tk = self.topk[0].cpu()
        for b in sorted({0, self.B - 1}):
            k, v = self.kv_of(b)
            kf, vf = k.float(), v.float()
            pages = self.block_table[b, : self.nb[b]].long()
            keys = self.index[pages].reshape(-1, DI)[: self.lens[b]].float()
            rows = sorted({0, self.new[b] // 2, self.new[b] - 1})
            for i in rows:
                t = self.cu_host[b] + i
                p = self.prefix[b] + i
                nvb = p // BS + 1
                s = keys[: p + 1] @ self.index_q[t, 0].float()
                padded = torch.full((nvb * BS,), -math.inf, device=s.device)
                padded[: p + 1] = s
                score = padded.view(nvb, BS).amax(1).cpu()
                ids = [int(x) for x in tk[t].tolist() if x >= 0]
                ok = (len(ids) == min(TOPK, nvb) and ids == sorted(set(ids))
                      and (nvb - 1) in ids)
                chosen = [j for j in ids if j != nvb - 1]
                rest = sorted(set(range(nvb)) - set(ids))
                if ok and chosen and rest:
                    tol = 1e-3 * float(score.abs().max()) + 1e-3
                    ok = float(score[chosen].min()) >= float(score[rest].max()) - tol
                if not ok:
                    topk_fail.append(t)
                    continue
                logits = (self.q[t].float() @ kf[: p + 1].T) * D ** -0.5
                want_d = torch.softmax(logits, -1) @ vf[: p + 1]
                err = float((self.out_dense[t].float() - want_d).abs().max())
                worst_d = max(worst_d, err / max(float(want_d.abs().max()), 1e-6))
                blk = torch.arange(p + 1, device=logits.device) // BS
                sel = torch.zeros(nvb, dtype=torch.bool, device=logits.device)
                sel[torch.tensor(ids, device=logits.device)] = True
                want_s = torch.softmax(logits.masked_fill(~sel[blk][None, :], -math.inf), -1) @ vf[: p + 1]
                err = float((self.out_sparse[t].float() - want_s).abs().max())
                worst_s = max(worst_s, err / max(float(want_s.abs().max()), 1e-6))
        flags = int(self.flags.item())
        ok = not topk_fail and worst_s <= CHECK_RTOL and worst_d <= CHECK_RTOL and flags == 0
        return {"ok": ok, "topk_failed_rows": topk_fail, "sparse_rel_err": worst_s,
                "dense_rel_err": worst_d, "error_flags": flags}


# ---------------------------------------------------------------------------- peers


def sdpa_peer(c: Case, backend: str, iters: int, seconds: float) -> Optional[dict]:
    """torch SDPA, causal lower-right, per request over contiguous K/V copies of the cache: GQA
    (one KV head) where the backend takes it, else K/V expanded to the 16 q heads."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    reqs = []
    for b in range(c.B):
        k, v = c.kv_of(b)
        q = c.q[c.cu_host[b]: c.cu_host[b + 1]].transpose(0, 1).unsqueeze(0).contiguous()
        mask = None if c.prefix[b] == 0 else causal_lower_right(q.shape[2], k.shape[0])
        reqs.append((q, k.unsqueeze(0).unsqueeze(0).contiguous(),
                     v.unsqueeze(0).unsqueeze(0).contiguous(), mask))

    def make(expand: bool) -> Callable[[], None]:
        args = []
        for q, k, v, m in reqs:
            if expand:
                k, v = k.expand(1, HQ, -1, -1).contiguous(), v.expand(1, HQ, -1, -1).contiguous()
            args.append((q, k, v, m))

        def run() -> None:
            with sdpa_kernel([be]):
                for q, k, v, m in args:
                    gqa = k.shape[1] != HQ
                    if m is None:
                        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                    else:
                        F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=gqa)
        return run

    r = None
    for expand in (False, True):
        try:
            r = time_call(make(expand), iters, seconds)
            r["gqa"] = not expand
            break
        except Exception as e:  # noqa: BLE001
            torch.cuda.synchronize()
            log(f"  sdpa {backend} ({'expanded' if expand else 'gqa'}): {type(e).__name__}: "
                f"{str(e)[:160]}")
    if r is None:
        return None
    r["tflops"] = c.dense_flop() / (r["median_us"] * 1e-6) / 1e12
    return r


def matmul_ceiling(fp8: bool) -> dict:
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    if fp8:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.ones((), device="cuda")
        fn = lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        fn = lambda: torch.matmul(a, b)  # noqa: E731
    r = time_call(fn, 20, 2.0)
    r["tflops"] = 2.0 * n ** 3 / (r["median_us"] * 1e-6) / 1e12
    return r


# ---------------------------------------------------------------------------- main


def fmt(x: Optional[float], nd: int = 0) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def write_tables(rows: list, env: dict, ceilings: dict, out: str) -> tuple:
    """Writes prefill.json and prefill.md for the rows so far; returns the ceilings line and the
    table's lines."""
    def best_sdpa(r: dict) -> Optional[float]:
        v = [r[k]["tflops"] for k in ("sdpa_flash", "sdpa_cudnn") if r.get(k)]
        return max(v) if v else None

    head = ("| dtype | case | check | insert us | index us | index TF/s | index prev TF/s | "
            "sparse us | sparse TF/s | sparse prev TF/s | union/8 tok | dense us | dense TF/s | "
            "dense prev TF/s | "
            "SDPA flash TF/s | SDPA cuDNN TF/s | dense / best SDPA |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in rows:
        def tf(st: str, prev: bool = False) -> Optional[float]:
            x = r.get(st)
            if x and prev:
                x = x.get("prev")
            return x["tflops"] if x else None
        sd = best_sdpa(r)
        ratio = None if sd is None else tf("dense") / sd
        lines.append("| " + " | ".join([
            r["dtype"], r["case"], "ok" if r["check"]["ok"] else "FAIL",
            fmt(r["insert"]["median_us"]), fmt(r["index"]["median_us"]), fmt(tf("index")),
            fmt(tf("index", True)), fmt(r["sparse"]["median_us"]), fmt(tf("sparse")),
            fmt(tf("sparse", True)), fmt(r["union8"]), fmt(r["dense"]["median_us"]),
            fmt(tf("dense")),
            fmt(tf("dense", True)), fmt(tf("sdpa_flash")), fmt(tf("sdpa_cudnn")),
            fmt(ratio, 2)]) + " |")
    ceil_line = ("Ceilings on this card (TFLOP/s): " +
                 ", ".join(f"{k} matmul {v['tflops']:.0f}" for k, v in ceilings.items()))
    md = "\n".join([f"# prefill_bench at {env['commit']} on {env['gpu']} ({env['date']})", "",
                    f"Command: `{env['command']}`", "", ceil_line, ""] + lines) + "\n"
    with open(os.path.join(out, "prefill.json"), "w") as f:
        json.dump({"env": env, "ceilings": ceilings, "rows": rows}, f, indent=1)
    with open(os.path.join(out, "prefill.md"), "w") as f:
        f.write(md)
    return ceil_line, lines


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    import msa

    KERNELS[0] = args.kernels
    set_kernels(args.kernels)

    os.makedirs(args.out, exist_ok=True)
    env = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
           "commit": os.environ.get("MSA_GIT_COMMIT") or git_commit(),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
           "kernels": args.kernels}
    log(f"prefill_bench on {env['gpu']} at {env['commit']}")
    ceilings = {"bf16": matmul_ceiling(False)}
    try:
        ceilings["fp8"] = matmul_ceiling(True)
    except Exception as e:  # noqa: BLE001
        log(f"fp8 ceiling: {type(e).__name__}: {e}")
    log("ceilings (TFLOP/s): " + ", ".join(f"{k} {v['tflops']:.0f}" for k, v in ceilings.items()))
    rows = []
    for dt in args.dtypes.split(","):
        for name in args.cases.split(","):
            t0 = time.time()
            c = Case(name, dt, msa)
            c.insert()
            if args.shared_blocks:
                c.lean_index()
            c.index_stage()
            c.sparse_stage()
            c.dense_stage()
            torch.cuda.synchronize()
            chk = c.check()
            row = {"case": name, "dtype": dt, "tokens": c.T, "check": chk,
                   "union8": c.union_blocks()}
            work = {"index": c.index_flop(), "sparse": c.sparse_flop(), "dense": c.dense_flop()}
            # The insert rewrites k in place in qkv (normed again on every replay), so it is
            # timed last, after the peers, which read the cache it writes.
            stages = {"index": c.index_stage, "sparse": c.sparse_stage, "dense": c.dense_stage}
            for st, fn in stages.items():
                r = time_call(fn, args.iters, args.seconds)
                if st in work:
                    r["tflops"] = work[st] / (r["median_us"] * 1e-6) / 1e12
                    if work[st] / PREV_RATE[st] <= args.prev_max_seconds:
                        pr = time_call(with_prev(fn), 3, args.seconds)
                        pr["tflops"] = work[st] / (pr["median_us"] * 1e-6) / 1e12
                        r["prev"] = pr
                row[st] = r
            if not args.skip_peers:
                for be in ("flash", "cudnn"):
                    row["sdpa_" + be] = sdpa_peer(c, be, args.iters, args.seconds)
            stages["insert"] = c.insert
            row["insert"] = time_call(c.insert, args.iters, args.seconds)
            rows.append(row)
            log(f"{dt} {name}: check {'ok' if chk['ok'] else 'FAIL ' + str(chk)}; " + ", ".join(
                f"{st} {row[st]['median_us']:.0f} us" for st in stages) + f" ({time.time() - t0:.0f} s)")
            del c
            torch.cuda.empty_cache()
            write_tables(rows, env, ceilings, args.out)  # a run cut short keeps its rows

    ceil_line, lines = write_tables(rows, env, ceilings, args.out)
    log("")
    log(ceil_line)
    log("\n".join(lines))
    return 0 if all(r["check"]["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
