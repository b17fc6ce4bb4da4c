#!/usr/bin/env python3
"""Decode at the memory roofline: one sparse MSA layer's decode step, timed stage by stage,
against its byte floor and against two PyTorch peers, in one process on the same inputs.

Shapes: MiniMax-M3 TP4 rank (Hq 16, Hkv 1, H_idx 1, head_dim 128, index_dim 128, block = page =
128 tokens, top-16). Per configuration (context x batch x query length x uniform/ragged lengths
x cache dtype) it times, each as a CUDA-graph replay with the L2 flushed (256 MiB read) before
every timed replay, CUDA events, warm-up, median over --iters replays:

  insert   msa.fused_qknorm_rope (sparse mode: q/k/index norm + RoPE, KV and index-K insert)
  index    msa.index_topk_decode (index scores + top-16 block selection, one op)
  attn     msa.sparse_attention_decode
  step     the three in sequence in one graph
  SDPA     peer 1: dense torch scaled_dot_product_attention over the full context, reading a
           dense [B, Hkv, ctx, D] view that aliases the paged pool (pages of a request are
           contiguous in the pool, so no copy)
  comp.    peer 2: own Triton index-score kernel over the paged index cache + torch.topk (own
           block forced) + torch.compile(flex_attention) over the paged pool with a BlockMask
           of physical page ids (bf16, query length 1, a subset of shapes: compile is costly)

bytes = all index keys of every request (seq_len * 128 * index_elem) + the union of the blocks
actually selected per request (read back from the top-k buffer) * 128 * Hkv * 128 * 2 * kv_elem;
floor_us = bytes / 4.4e12 * 1e6, target_us = 1.10 * floor_us + 8.

Every configuration is checked before it is timed (top-k validity from fp32 block scores, and
a few attention rows against a float32 softmax over the selected blocks, 2e-2 relative).

`--device cpu --tiny` runs a small grid through the same code path minus graphs, events, the
L2 flush and Triton (time.perf_counter; the composite peer uses a torch index scorer unless
TRITON_INTERPRET=1 is set) so the script can be tested without a GPU. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

HQ, HKV, HIDX, D, DI, BS, TOPK, ROT = 16, 1, 1, 128, 128, 128, 16, 64
QKV_WIDTH = (HQ + 2 * HKV + HIDX) * D + DI
HBM_BYTES_PER_S = 4.4e12
TARGET_FACTOR, TARGET_LATENCY_US = 1.10, 8.0
FLUSH_BYTES = 256 * 2**20
FP8_SCALE = 0.0625  # per-layer K and V scale of the fp8 cache (stored = e4m3(x / scale))
CHECK_RTOL = 2e-2
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = time.time()

DTYPES = {
    # name: (kv cache dtype, index cache / index_q dtype)
    "bf16": (torch.bfloat16, torch.bfloat16),
    "fp8": (torch.float8_e4m3fn, torch.float8_e4m3fn),
}


def log(*a: object) -> None:
    print(*a, flush=True)


def elapsed() -> float:
    return time.time() - T0


# ---------------------------------------------------------------------------- arguments


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = 1
    if s.endswith("K"):
        mult, s = 1024, s[:-1]
    elif s.endswith("M"):
        mult, s = 1024 * 1024, s[:-1]
    return int(s) * mult


def parse_list(s: str, conv: Callable[[str], Any] = parse_size) -> list:
    return [conv(x) for x in s.split(",") if x.strip()]


def fmt_ctx(c: int) -> str:
    if c % (1024 * 1024) == 0:
        return f"{c // (1024 * 1024)}M"
    return f"{c // 1024}K" if c % 1024 == 0 else str(c)


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (decode_bench.json / .md)")
    p.add_argument("--contexts", help="comma list, K suffix allowed (default 8K,32K,128K,512K;"
                   " --tiny: 1024,4096)")
    p.add_argument("--batches", help="comma list (default 1,4,16,64; --tiny: 1,3)")
    p.add_argument("--qlens", default="1,4", help="decode query lengths (1 + speculative)")
    p.add_argument("--dtypes", default="bf16,fp8", help="bf16 and/or fp8 caches")
    p.add_argument("--ragged", default="both", choices=["both", "uniform", "ragged"])
    p.add_argument("--peers", default="all", choices=["all", "sdpa", "none"])
    p.add_argument("--composite-batches", default="1,16,64",
                   help="batches at which the composite peer runs (--tiny: all)")
    p.add_argument("--composite-contexts", default="8K,32K,128K",
                   help="contexts at which the composite peer runs (--tiny: all)")
    p.add_argument("--flex-options", default="default;SPLIT_KV=8;SPLIT_KV=128",
                   help="flex_attention kernel_options sets tried by the composite peer (best"
                   " reported): ';' between sets, '+' between keys")
    p.add_argument("--flex-tune-max-batch", type=int, default=4,
                   help="try every --flex-options set only up to this batch (else the first)")
    p.add_argument("--time-budget", type=float, default=540.0,
                   help="seconds; no new configuration starts after this (results kept)")
    p.add_argument("--composite-reserve", type=float, default=45.0,
                   help="skip the composite peer (compile) when less budget than this is left")
    p.add_argument("--iters", type=int, default=None, help="timed replays (default 30; tiny 5)")
    p.add_argument("--warmup", type=int, default=5, help="untimed replays before timing")
    p.add_argument("--flush", default="read", choices=["read", "write"],
                   help="how L2 is evicted before each timed replay: read a 256 MiB buffer "
                   "(default) or write it (leaves dirty lines whose write-back slows the call)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="small grid (CPU testing / smoke run)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch-invariant", action="store_true",
                   help="run the index and attention ops with batch_invariant=True (their cost "
                   "against a run without it)")
    a = p.parse_args(argv)
    a.contexts = parse_list(a.contexts) if a.contexts else (
        [1024, 4096] if a.tiny else [8192, 32768, 131072, 524288])
    a.batches = parse_list(a.batches, int) if a.batches else ([1, 3] if a.tiny else [1, 4, 16, 64])
    a.qlens = parse_list(a.qlens, int)
    a.dtypes = parse_list(a.dtypes, str)
    for d in a.dtypes:
        if d not in DTYPES:
            p.error(f"--dtypes: unknown {d!r} (bf16, fp8)")
    for q in a.qlens:
        if not 1 <= q <= 8:
            p.error("--qlens: 1..8")
    for c in a.contexts:
        if c < 8 or c % BS:
            p.error(f"--contexts: {c} is not a positive multiple of {BS}")
    a.raggeds = {"both": [False, True], "uniform": [False], "ragged": [True]}[a.ragged]
    if a.tiny:
        a.composite_batches_l = a.batches
        a.composite_contexts_l = a.contexts
    else:
        a.composite_batches_l = parse_list(a.composite_batches, int)
        a.composite_contexts_l = parse_list(a.composite_contexts)
    a.flex_options_l = parse_flex_options(a.flex_options)
    if a.iters is None:
        a.iters = 5 if a.device == "cpu" else 30
    a.iters = max(1, a.iters)
    return a


# ---------------------------------------------------------------------------- environment


def git_commit() -> Optional[str]:
    # An explicit MSA_GIT_COMMIT names the measured tree: a copy of a working tree (as on a remote
    # GPU machine) may carry git metadata older than its files.
    if os.environ.get("MSA_GIT_COMMIT"):
        return os.environ["MSA_GIT_COMMIT"]
    try:
        r = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        if r.returncode != 0:
            return os.environ.get("MSA_GIT_COMMIT")
        commit = r.stdout.strip()
        d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=10)
        return commit + ("-dirty" if d.returncode == 0 and d.stdout.strip() else "")
    except Exception:  # noqa: BLE001
        return os.environ.get("MSA_GIT_COMMIT")


def environment(args: argparse.Namespace, msa: Any) -> dict:
    env: dict = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "git_commit": git_commit(),
        "msa_version": getattr(msa, "__version__", None),
        "msa_built_with_cuda": bool(msa.built_with_cuda()),
        "device": args.device,
        "cpu_threads": torch.get_num_threads(),
    }
    try:
        import triton  # noqa: F401

        env["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        env["triton"] = f"absent ({type(e).__name__})"
    if args.device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, sms=p.multi_processor_count, gpu_mem_bytes=p.total_memory,
                   l2_bytes=getattr(p, "L2_cache_size", None),
                   cudnn=torch.backends.cudnn.version())
    return env


# ---------------------------------------------------------------------------- timing


class Timer:
    """Median time of fn. CUDA: graph capture of fn (falls back to eager launches if capture
    fails), a 256 MiB read (or write, --flush) before every replay to evict the 60 MiB L2, CUDA events around the
    replay only. CPU: time.perf_counter around plain calls."""

    def __init__(self, device: str, iters: int, warmup: int, flush: str = "read") -> None:
        self.device, self.iters, self.warmup, self.flush_mode = device, iters, warmup, flush
        self.flush = (torch.ones(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
                      if device == "cuda" else None)

    def evict(self) -> None:
        """Evicts L2 before a timed call. "read" (default) sums the buffer: L2 is left holding
        clean lines of it, as after any unrelated kernel. "write" zeroes it, which leaves ~60 MiB
        of dirty lines whose write-back then competes with the timed call for DRAM bandwidth
        (it adds several us to small calls)."""
        if self.flush_mode == "write":
            self.flush.zero_()
        else:
            self.flush.sum(dtype=torch.int32)

    @staticmethod
    def capture(fn: Callable[[], Any]) -> torch.cuda.CUDAGraph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()  # warm-up outside the capture (lazy initialisation, compilation)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return graph

    def measure(self, fn: Callable[[], Any]) -> dict:
        if self.device != "cuda":
            for _ in range(min(self.warmup, 2)):
                fn()
            ts = []
            for _ in range(self.iters):
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e6)
            return self._stats(ts, "cpu-perf_counter")
        mode, note = "graph", None
        graph = None
        try:
            graph = self.capture(fn)
            call = graph.replay
        except Exception as e:  # noqa: BLE001
            note = f"graph capture failed ({type(e).__name__}: {str(e)[:200]}); eager timing"
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            graph, call, mode = None, fn, "eager"
        for _ in range(self.warmup):
            self.evict()
            call()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        for s, e in zip(starts, ends):
            self.evict()  # its ~65 us also hide the host's launch of call()
            s.record()
            call()
            e.record()
        torch.cuda.synchronize()
        ts = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
        del graph
        r = self._stats(ts, mode)
        if note:
            r["note"] = note
        return r

    @staticmethod
    def _stats(ts: list, mode: str) -> dict:
        ts = sorted(ts)
        return {"median_us": statistics.median(ts), "min_us": ts[0],
                "p90_us": ts[min(len(ts) - 1, int(0.9 * len(ts)))], "n": len(ts), "mode": mode}


# ---------------------------------------------------------------------------- data


def fill_normal_(t: torch.Tensor, std: float = 1.0) -> None:
    """Normal values (already seeded) into a float / bf16 / e4m3 tensor, in 256 M chunks for
    e4m3 (no normal_ kernel for fp8)."""
    flat = t.view(-1)
    if t.dtype in (torch.float32, torch.bfloat16, torch.float16):
        flat.normal_(0.0, std)
        return
    chunk = 1 << 28
    for i in range(0, flat.numel(), chunk):
        j = min(i + chunk, flat.numel())
        flat[i:j].copy_(torch.empty(j - i, dtype=torch.bfloat16, device=t.device).normal_(0, std))


class Group:
    """Caches and static inputs shared by the configurations of one (context, batch, dtype).

    Pool layout: request b owns pages [b * NB, (b + 1) * NB) in order (block_table[b, j] =
    b * NB + j), so the packed KV pool [B * NB, 1, 128, 256] viewed as [B, NB * 128, 256] is a
    dense per-request view of the same memory (K = [..., :128], V = [..., 128:]).
    """

    def __init__(self, ctx: int, batch: int, dtype_name: str, device: str, seed: int) -> None:
        self.ctx, self.batch, self.dtype_name, self.device = ctx, batch, dtype_name, device
        self.kv_dtype, self.index_dtype = DTYPES[dtype_name]
        self.nb = ctx // BS
        self.num_pages = batch * self.nb
        torch.manual_seed(seed)
        self.kv = torch.empty(self.num_pages, HKV, BS, 2 * D, dtype=self.kv_dtype, device=device)
        self.index = torch.empty(self.num_pages, BS, DI, dtype=self.index_dtype, device=device)
        fp8 = self.kv_dtype == torch.float8_e4m3fn
        # fp8: stored ~ N(0, 16) so that stored * scale ~ N(0, 1) like the bf16 cache.
        fill_normal_(self.kv, 1.0 / FP8_SCALE if fp8 else 1.0)
        fill_normal_(self.index, 1.0)
        self.k_scale = self.v_scale = None
        if fp8:
            self.k_scale = torch.full((1,), FP8_SCALE, dtype=torch.float32, device=device)
            self.v_scale = torch.full((1,), FP8_SCALE, dtype=torch.float32, device=device)
        self.block_table = torch.arange(self.num_pages, dtype=torch.int32,
                                        device=device).view(batch, self.nb)
        self.cos_sin = None
        self.norm_w = [0.1 * torch.randn(n, device=device) for n in (D, D, DI, DI)]

    def rope_table(self, msa: Any) -> torch.Tensor:
        if self.cos_sin is None:
            self.cos_sin = msa.make_rope_cache(self.ctx, ROT, device=self.device)
        return self.cos_sin

    @property
    def kv_elem(self) -> int:
        return self.kv.element_size()

    @property
    def index_elem(self) -> int:
        return self.index.element_size()


class Config:
    """Per-configuration inputs, buffers and the three msa stages as closures."""

    def __init__(self, g: Group, qlen: int, ragged: bool, seed: int, msa: Any,
                 batch_invariant: bool = False) -> None:
        self.g, self.qlen, self.ragged = g, qlen, ragged
        b, dev = g.batch, g.device
        if ragged:
            lo = min(1024, max(qlen, g.ctx // 4))
            gen = torch.Generator().manual_seed(seed)
            lens = torch.randint(lo, g.ctx + 1, (b,), generator=gen).tolist()
        else:
            lens = [g.ctx] * b
        self.lens_host = lens
        self.t = t = b * qlen
        pos = [s - qlen + r for s in lens for r in range(qlen)]
        req = [i for i in range(b) for _ in range(qlen)]
        self.pos_host = pos
        slots = [(i * g.nb + p // BS) * BS + p % BS for i, p in zip(req, pos)]  # = page*BS+off
        self.seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
        self.positions = torch.tensor(pos, dtype=torch.int64, device=dev)
        self.slots = torch.tensor(slots, dtype=torch.int64, device=dev)
        torch.manual_seed(seed + 1)
        self.qkv = torch.randn(t, QKV_WIDTH, device=dev).to(torch.bfloat16)
        self.q = torch.empty(t, HQ, D, dtype=torch.bfloat16, device=dev)
        self.index_q = torch.empty(t, HIDX, DI, dtype=g.index_dtype, device=dev)
        self.topk = torch.full((HIDX, t, TOPK), -1, dtype=torch.int32, device=dev)
        self.out = torch.empty(t, HQ, D, dtype=torch.bfloat16, device=dev)
        self.flags = torch.zeros(1, dtype=torch.int32, device=dev)
        caps = msa.Capacities(max_requests=b, max_tokens=t, max_context=g.ctx,
                              max_decode_query_len=qlen, num_q_heads=HQ, num_kv_heads=HKV,
                              num_index_heads=HIDX, head_dim=D, index_dim=DI, rotary_dim=ROT,
                              block_size=BS, topk=TOPK, num_blocks=g.num_pages)
        nbytes = msa.workspace_bytes(caps, dev, dtype=torch.bfloat16, kv_cache_dtype=g.kv_dtype,
                                     index_dtype=g.index_dtype)
        self.workspace = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=dev)
        cos_sin = g.rope_table(msa)
        qn, kn, iqn, ikn = g.norm_w

        def insert() -> None:
            msa.fused_qknorm_rope(
                qkv=self.qkv, positions=self.positions, cos_sin_cache=cos_sin,
                q_norm_weight=qn, k_norm_weight=kn, num_q_heads=HQ, num_kv_heads=HKV,
                mode=msa.PreAttentionMode.SPARSE, num_index_heads=HIDX, rotary_dim=ROT,
                index_q_norm_weight=iqn, index_k_norm_weight=ikn, slot_mapping=self.slots,
                kv_cache=g.kv, k_scale=g.k_scale, v_scale=g.v_scale, index_cache=g.index,
                q_out=self.q, index_q_out=self.index_q, error_flags=self.flags,
                workspace=self.workspace)

        def index() -> None:
            msa.index_topk_decode(
                index_q=self.index_q, index_cache=g.index, block_table=g.block_table,
                seq_lens=self.seq_lens, topk_out=self.topk, query_len=qlen, topk=TOPK,
                error_flags=self.flags, workspace=self.workspace, batch_invariant=batch_invariant)

        def attn() -> None:
            msa.sparse_attention_decode(
                q=self.q, kv_cache=g.kv, block_table=g.block_table, seq_lens=self.seq_lens,
                topk=self.topk, out=self.out, query_len=qlen, k_scale=g.k_scale,
                v_scale=g.v_scale, error_flags=self.flags, workspace=self.workspace,
                batch_invariant=batch_invariant)

        def step() -> None:
            insert()
            index()
            attn()

        self.stages = {"insert": insert, "index": index, "attn": attn, "step": step}

    # -------------------------------------------------------------------- bytes and checks

    def bytes_model(self) -> dict:
        """Index keys of every request + union of selected blocks per request (actual top-k)."""
        g = self.g
        sel = self.topk[0, : self.t].view(g.batch, self.qlen * TOPK).long()
        hit = torch.zeros(g.batch, g.nb + 1, dtype=torch.bool, device=sel.device)
        hit.scatter_(1, torch.where(sel >= 0, sel, torch.full_like(sel, g.nb)), True)
        union = hit[:, : g.nb].sum(1)
        union_blocks = int(union.sum())
        idx_bytes = sum(self.lens_host) * DI * g.index_elem
        attn_bytes = union_blocks * BS * HKV * D * 2 * g.kv_elem
        return {"index_bytes": idx_bytes, "attn_bytes": attn_bytes,
                "bytes": idx_bytes + attn_bytes, "union_blocks": union_blocks,
                "union_blocks_per_request_max": int(union.max())}

    def check(self) -> dict:
        """Top-k validity (fp32 block scores) and attention rows (fp32 softmax over the selected
        blocks) for the rows of the first, middle and last request."""
        g = self.g
        k_all = g.kv[:, 0, :, :D]  # [pages, bs, D]
        v_all = g.kv[:, 0, :, D:]
        ks = float(g.k_scale) if g.k_scale is not None else 1.0
        vs = float(g.v_scale) if g.v_scale is not None else 1.0
        topk = self.topk[0].cpu()
        bt = g.block_table
        worst_attn, topk_fail, details = 0.0, [], []
        for b in sorted({0, g.batch // 2, g.batch - 1}):
            length = self.lens_host[b]
            pages = bt[b, : math.ceil(length / BS)].long()
            keys = g.index[pages].reshape(-1, DI)[:length].float()  # [len, Di]
            for r in range(self.qlen):
                t = b * self.qlen + r
                p = self.pos_host[t]
                nvb = p // BS + 1
                s = keys[: p + 1] @ self.index_q[t, 0].float()
                padded = torch.full((nvb * BS,), -math.inf, device=s.device)
                padded[: p + 1] = s
                score = padded.view(nvb, BS).amax(1).cpu()
                ids = [int(x) for x in topk[t].tolist() if x >= 0]
                ok = (len(ids) == min(TOPK, nvb) and ids == sorted(set(ids))
                      and all(0 <= i < nvb for i in ids) and (nvb - 1) in ids)
                if ok:
                    chosen = [i for i in ids if i != nvb - 1]
                    rest = sorted(set(range(nvb)) - set(ids))
                    if chosen and rest:
                        tol = 1e-4 * float(score.abs().max()) + 1e-3
                        ok = float(score[chosen].min()) >= float(score[rest].max()) - tol
                if not ok:
                    topk_fail.append(t)
                    continue
                sel_pages = bt[b, torch.tensor(ids, device=bt.device)].long()
                kk = k_all[sel_pages].reshape(-1, D).float() * ks
                vv = v_all[sel_pages].reshape(-1, D).float() * vs
                tok = (torch.tensor(ids, device=kk.device)[:, None] * BS
                       + torch.arange(BS, device=kk.device)[None, :]).reshape(-1)
                logits = (self.q[t].float() @ kk.T) * D ** -0.5
                logits = logits.masked_fill((tok > p)[None, :], -math.inf)
                want = torch.softmax(logits, -1) @ vv
                got = self.out[t].float()
                err = float((got - want).abs().max()) / max(float(want.abs().max()), 1e-6)
                if not math.isfinite(err):
                    err = math.inf
                worst_attn = max(worst_attn, err)
                details.append((t, round(err, 5)))
        flags = int(self.flags.item())
        ok = not topk_fail and worst_attn <= CHECK_RTOL and flags == 0
        if ok:
            label = "ok"
        else:
            why = []
            if topk_fail:
                why.append(f"topk rows {topk_fail[:4]}")
            if worst_attn > CHECK_RTOL:
                why.append(f"attn {worst_attn:.1e}")
            if flags:
                why.append(f"flags {flags}")
            label = "FAIL " + ", ".join(why)
        return {"ok": ok, "label": label, "attn_max_rel_err": worst_attn,
                "topk_failed_rows": topk_fail, "rows": details, "error_flags": flags}


# ---------------------------------------------------------------------------- peers


def sdpa_peer(cfg: Config, timer: Timer) -> dict:
    """Dense SDPA decode over each request's full context, from a dense view aliasing the pool.

    Hkv = 1, so the GQA group (16 heads x qlen rows) is folded into the query-length axis:
    q [B, 1, 16 * qlen, D] against k, v [B, 1, L, D] is exactly GQA 16:1 (the MQA fold, what
    enable_gqa computes) and lets the flash kernel read K/V once per request. Ragged batches
    are run padded to the batch's longest request with no mask (the bytes of a padded dense
    batch; a lower bound on a masked run). No causal mask between the qlen rows (same cost).
    """
    g = cfg.g
    if g.kv_dtype != torch.bfloat16:
        return {"skipped": "fp8 cache (SDPA has no fp8 path)"}
    if not g.kv.is_contiguous() or HKV != 1:
        return {"skipped": "dense view would need a copy"}
    lmax = max(cfg.lens_host)
    dense = g.kv.view(g.batch, g.nb * BS, 2 * D)
    kd = dense[:, :lmax, :D].unsqueeze(1)
    vd = dense[:, :lmax, D:].unsqueeze(1)
    assert kd.data_ptr() == g.kv.data_ptr()  # a view of the pool, no copy
    qd = cfg.q.view(g.batch, cfg.qlen, HQ, D).permute(0, 2, 1, 3).reshape(
        g.batch, 1, HQ * cfg.qlen, D).contiguous()
    res: dict = {"kv_len": lmax, "bytes": g.batch * lmax * D * 2 * g.kv_elem}
    if cfg.g.device == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        errors = []
        for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", None):
            def fn(name: Optional[str] = name) -> torch.Tensor:
                if name is None:
                    return F.scaled_dot_product_attention(qd, kd, vd)
                with sdpa_kernel([getattr(SDPBackend, name)]):
                    return F.scaled_dot_product_attention(qd, kd, vd)
            try:
                o = fn()
                torch.cuda.synchronize()
                res["backend"] = name or "default"
                break
            except Exception as e:  # noqa: BLE001
                errors.append(f"{name}: {type(e).__name__}: {str(e)[:120]}")
        else:
            return {"error": "; ".join(errors)}
        if errors:
            res["backend_errors"] = errors
    else:
        def fn() -> torch.Tensor:
            return F.scaled_dot_product_attention(qd, kd, vd)
        o = fn()
        res["backend"] = "cpu"
    # Sanity: SDPA's output for the first row against a float32 dense softmax (over what the
    # peer computes: the first lmax tokens).
    k0 = kd[0, 0].float()
    v0 = vd[0, 0].float()
    want = torch.softmax((qd[0, 0, :1].float() @ k0.T) * D ** -0.5, -1) @ v0
    res["check_rel_err"] = float((o[0, 0, :1].float() - want).abs().max()) / max(
        float(want.abs().max()), 1e-6)
    res.update(timer.measure(fn))
    return res


_TRITON_KERNEL: Any = None
_FLEX: dict = {}
_FLEX_LIMIT: Optional[torch.Tensor] = None  # [B] exclusive kv_idx bound inside the own page


def _flex_partial_mask(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
    # Only the own (partial) block is a masked block; keys past seq_len - 1 are invisible.
    return kv_idx < _FLEX_LIMIT[b]


def triton_indexer() -> Any:
    """Own Triton block-max index-score kernel over the paged index cache (one program per
    request and group of BPP blocks; the own block scores +inf, invisible blocks -inf)."""
    global _TRITON_KERNEL
    if _TRITON_KERNEL is not None:
        return _TRITON_KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def index_block_max(q_ptr, k_ptr, bt_ptr, len_ptr, out_ptr, nb, bt_stride,
                        BPP: tl.constexpr, DD: tl.constexpr, TT: tl.constexpr):
        b = tl.program_id(0)
        c = tl.program_id(1)
        od = tl.arange(0, DD)
        ot = tl.arange(0, TT)
        seq = tl.load(len_ptr + b)
        own = (seq - 1) // TT
        q = tl.load(q_ptr + b * DD + od).to(tl.float32)
        for i in range(BPP):
            blk = c * BPP + i
            in_range = blk < nb
            visible = in_range & (blk <= own)
            page = tl.load(bt_ptr + b * bt_stride + blk, mask=visible, other=0).to(tl.int64)
            tok_ok = (blk * TT + ot) < seq
            kmask = (tok_ok & visible)[:, None]
            k = tl.load(k_ptr + page * (TT * DD) + ot[:, None] * DD + od[None, :], mask=kmask,
                        other=0.0)
            s = tl.sum(k.to(tl.float32) * q[None, :], axis=1)
            s = tl.where(tok_ok, s, float("-inf"))
            m = tl.max(s, axis=0)
            m = tl.where(blk == own, float("inf"), m)
            m = tl.where(visible, m, float("-inf"))
            tl.store(out_ptr + b * nb + blk, m, mask=in_range)

    def run(iq: torch.Tensor, index: torch.Tensor, bt: torch.Tensor, lens: torch.Tensor,
            out: torch.Tensor) -> None:
        bsz, nb = bt.shape
        bpp = 1
        while bpp < 16 and bsz * nb // (bpp * 2) >= 4 * 132:
            bpp *= 2
        index_block_max[(bsz, triton.cdiv(nb, bpp))](iq, index, bt, lens, out, nb, bt.stride(0),
                                                      BPP=bpp, DD=DI, TT=BS, num_warps=8)

    _TRITON_KERNEL = run
    return run


def torch_indexer(iq: torch.Tensor, index: torch.Tensor, bt: torch.Tensor, lens: torch.Tensor,
                  out: torch.Tensor) -> None:
    """CPU stand-in for the Triton kernel (same scores)."""
    bsz, nb = bt.shape
    keys = index[bt.long()].float()  # [B, NB, BS, Di]
    s = torch.einsum("bntd,bd->bnt", keys, iq.float())
    tok = torch.arange(nb * BS, device=s.device).view(1, nb, BS)
    s = s.masked_fill(tok >= lens.view(-1, 1, 1), -math.inf).amax(-1)
    own = ((lens.long() - 1) // BS).view(-1, 1)
    blk = torch.arange(nb, device=s.device).view(1, -1)
    s = torch.where(blk == own, torch.full_like(s, math.inf), s)
    out.copy_(torch.where(blk > own, torch.full_like(s, -math.inf), s))


def flex_fn(device: str) -> Any:
    if device in _FLEX:
        return _FLEX[device]
    from torch.nn.attention.flex_attention import flex_attention

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(256, getattr(torch._dynamo.config, name)))
    for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(4096, getattr(torch._dynamo.config, name)))
    _FLEX[device] = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    return _FLEX[device]


def parse_flex_options(spec: str) -> list:
    """"default;SPLIT_KV=8;SPLIT_KV=128" -> [None, {"SPLIT_KV": 8}, {"SPLIT_KV": 128}]."""
    out: list = []
    for item in spec.split(";"):
        item = item.strip()
        if not item:
            continue
        if item.lower() in ("default", "none"):
            out.append(None)
            continue
        opts: dict = {}
        for kv in item.split("+"):
            k, _, v = kv.partition("=")
            v = v.strip()
            val: Any = v
            if v.lower() in ("true", "false"):
                val = v.lower() == "true"
            else:
                try:
                    val = int(v)
                except ValueError:
                    pass
            opts[k.strip()] = val
        out.append(opts)
    return out or [None]


def composite_peer(cfg: Config, timer: Timer, flex_options: list) -> dict:
    """Triton index scores over the paged index cache + torch.topk (own block forced first)
    + compiled flex_attention over the paged pool with a BlockMask of physical page ids: the
    own block as the one partial (masked) block, the other selected blocks as full blocks.
    Each flex kernel_options set is compiled and timed; the best is reported."""
    global _FLEX_LIMIT
    from torch.nn.attention.flex_attention import BlockMask

    g = cfg.g
    dev = g.device
    bsz, nb, np_ = g.batch, g.nb, g.num_pages
    k_sel = min(TOPK, nb)
    bt = g.block_table
    bt64 = bt.long()
    lens = cfg.seq_lens
    own = (lens.long() - 1) // BS
    own_page = bt64.gather(1, own[:, None]).squeeze(1)
    _FLEX_LIMIT = (own_page * BS + (lens.long() - own * BS)).to(torch.int32)
    nsel = torch.clamp(own + 1, max=k_sel)
    pool = g.kv.view(1, 1, np_ * BS, 2 * D)
    kf, vf = pool[..., :D], pool[..., D:]
    qf = cfg.q.view(bsz, 1, HQ, D).transpose(1, 2)  # [B, Hq, 1, D]
    iqf = cfg.index_q.view(bsz, DI)
    scores = torch.empty(bsz, nb, dtype=torch.float32, device=dev)
    res: dict = {}
    if dev == "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        scorer, res["indexer"] = triton_indexer(), "triton"
    else:
        scorer, res["indexer"] = torch_indexer, "torch (cpu stand-in)"
    flex = flex_fn(dev)
    state: dict = {}

    def block_mask(capacity: int) -> Any:
        kv_num = torch.ones(bsz, 1, 1, dtype=torch.int32, device=dev)
        kv_idx = torch.zeros(bsz, 1, 1, capacity, dtype=torch.int32, device=dev)
        full_num = (nsel - 1).to(torch.int32).view(bsz, 1, 1)
        full_idx = torch.zeros(bsz, 1, 1, capacity, dtype=torch.int32, device=dev)
        return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=BS,
                                        mask_mod=_flex_partial_mask,
                                        seq_lengths=(1, np_ * BS), compute_q_blocks=False)

    def fn() -> torch.Tensor:
        bm = state["bm"]
        scorer(iqf, g.index, bt, lens, scores)
        sel = torch.topk(scores, k_sel, dim=-1).indices  # own block (+inf) first
        phys = torch.gather(bt64, 1, sel).to(torch.int32)
        bm.kv_indices[:, 0, 0, 0].copy_(phys[:, 0])
        bm.full_kv_indices[:, 0, 0, : k_sel - 1].copy_(phys[:, 1:])
        state["sel"] = sel
        return flex(qf, kf, vf, block_mask=bm, enable_gqa=True, scale=D ** -0.5,
                    kernel_options=state["opts"])

    runs, best = [], None
    for opts in flex_options:
        label = "default" if opts is None else "+".join(f"{k}={v}" for k, v in opts.items())
        state["opts"] = opts
        r: dict = {"options": label}
        t = time.time()
        try:
            o = None
            # BlockMask capacity: top-k ids (GPU); some lowerings (CPU) want the whole pool.
            for cap in ([state["cap"]] if "cap" in state else [k_sel, np_]):
                state["bm"] = block_mask(cap)
                try:
                    o = fn()
                    state["cap"] = cap
                    break
                except Exception as e:  # noqa: BLE001
                    if cap == np_:
                        raise
                    r["capacity_note"] = f"capacity {cap} failed ({type(e).__name__}); pool"
            if dev == "cuda":
                torch.cuda.synchronize()
            r["first_call_s"] = round(time.time() - t, 2)
            # Agreement with our op (query length 1): same selection, same output.
            sel = state["sel"]
            ours = cfg.topk[0, :bsz].long()
            same, err = 0, 0.0
            for b in range(bsz):
                n = int(nsel[b])
                a = sorted(int(x) for x in sel[b, :n].tolist())
                m = [int(x) for x in ours[b].tolist() if x >= 0]
                if a == m:
                    same += 1
                    w = cfg.out[b].float()
                    err = max(err, float((o[b, :, 0].float() - w).abs().max())
                              / max(float(w.abs().max()), 1e-6))
            r["same_selection_frac"] = same / bsz
            r["rel_err_vs_ours_where_same"] = err
            r["agrees"] = same > 0 and err <= CHECK_RTOL
            r.update(timer.measure(fn))
            if best is None or r["median_us"] < best["median_us"]:
                best = r
        except Exception as e:  # noqa: BLE001
            r["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if dev == "cuda":
                try:
                    torch.cuda.synchronize()
                except Exception:  # noqa: BLE001
                    pass
        runs.append(r)
    res["runs"] = runs
    res["block_mask_capacity"] = state.get("cap")
    if best is None:
        res["error"] = "; ".join(r.get("error", "?") for r in runs)
        return res
    res.update({k: v for k, v in best.items() if k != "options"})
    res["best_options"] = best["options"]
    return res


# ---------------------------------------------------------------------------- output


COLUMNS = ["ctx", "B", "qlen", "lens", "dtype", "insert us", "index+topk us", "attn us",
           "step us", "bytes MB", "GB/s", "floor us", "target us", "step/target", "SDPA us",
           "composite us", "x SDPA", "x comp", "CHECK"]


def _f(x: Any, nd: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.{nd}f}"


def table_row(r: dict) -> list:
    t = r.get("times", {})
    m = lambda k: t.get(k, {}).get("median_us") if isinstance(t.get(k), dict) else None  # noqa
    sd = r.get("sdpa", {})
    cp = r.get("composite", {})
    sd_us = sd.get("median_us")
    cp_us = cp.get("median_us")
    step = m("step")
    sd_cell = _f(sd_us) if sd_us is not None else ("n/a" if "skipped" in sd else
                                                    ("ERR" if "error" in sd else "-"))
    cp_cell = _f(cp_us) if cp_us is not None else ("ERR" if "error" in cp else "-")
    if cp_us is not None and not cp.get("agrees", False):
        cp_cell += "*"
    return [
        fmt_ctx(r["ctx"]), str(r["B"]), str(r["qlen"]), "ragged" if r["ragged"] else "uniform",
        r["dtype"], _f(m("insert")), _f(m("index")), _f(m("attn")), _f(step),
        _f(r.get("bytes", {}).get("bytes", 0) / 1e6 if r.get("bytes") else None, 2),
        _f(r.get("achieved_GBps"), 0), _f(r.get("floor_us")), _f(r.get("target_us")),
        _f(r.get("step_over_target"), 2), sd_cell, cp_cell,
        _f(sd_us / step if sd_us and step else None, 2),
        _f(cp_us / step if cp_us and step else None, 2),
        r.get("check", {}).get("label", "ERR" if r.get("error") else "-"),
    ]


def markdown_table(rows: list) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" if i < 5 or i == len(COLUMNS) - 1 else "---:"
                            for i in range(len(COLUMNS))) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(table_row(r)) + " |")
    return "\n".join(lines)


NOTES = """\
- Times: median over {iters} {how} on {device}. insert = msa.fused_qknorm_rope (sparse mode,
  KV + index-K insert), index+topk = msa.index_topk_decode, attn = msa.sparse_attention_decode,
  step = the three in one graph.
- bytes = index keys of every request (seq_len x 128 x index elem) + union of the selected
  blocks per request (from the actual top-k buffer) x 128 x Hkv x 128 x 2 x kv elem;
  floor = bytes / 4.4 TB/s; target = 1.10 x floor + 8 us; GB/s = bytes / step.
- SDPA: dense torch SDPA (flash backend when it runs) over the full context of every request,
  from a dense view aliasing the paged pool (each request's pages are contiguous); Hkv = 1, so
  the 16 q heads x qlen rows are folded into the query axis (MQA, = GQA 16:1). Ragged batches
  run padded to the longest request, unmasked. n/a: fp8 caches (no fp8 SDPA).
- composite: own Triton index-score kernel (paged) + torch.topk (own block forced) +
  torch.compile(flex_attention) over the paged pool with a BlockMask of physical page ids;
  only bf16, qlen 1, B in {comp_b}, ctx in {comp_c} (compile cost); '-' elsewhere. Best of
  the flex kernel_options sets tried (JSON: runs). '*' = its output or selection disagrees
  with ours (see JSON).
- x SDPA / x comp = peer time / our step time (our step includes the fused insert, which the
  peers do not do). CHECK: top-k validity (fp32 block scores) and attention rows against an
  fp32 softmax over the selected blocks, 2e-2 relative, error flags 0."""


def write_outputs(args: argparse.Namespace, env: dict, rows: list, extra: dict) -> str:
    os.makedirs(args.out, exist_ok=True)
    doc = {"env": env, "args": {k: v for k, v in vars(args).items()}, "rows": rows, **extra}
    tmp = os.path.join(args.out, "decode_bench.json.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.replace(tmp, os.path.join(args.out, "decode_bench.json"))
    how = (f"CUDA-graph replays (L2 flushed by a 256 MiB {args.flush} before each, CUDA events"
           " around the replay only)" if args.device == "cuda" else
           "plain calls (CPU test path: time.perf_counter, no graphs, no L2 flush)")
    notes = NOTES.format(iters=args.iters, how=how, device=env.get("gpu", args.device),
                         comp_b=",".join(map(str, args.composite_batches_l)),
                         comp_c=",".join(fmt_ctx(c) for c in args.composite_contexts_l))
    table = markdown_table(rows)
    head = [
        "# Decode step benchmark (one sparse layer, TP4 rank: Hq 16, Hkv 1, D 128, top-16)",
        "",
        f"- command: `{env['command']}`",
        f"- git {env.get('git_commit')}, torch {env['torch']} (CUDA {env.get('torch_cuda')}), "
        f"triton {env.get('triton')}, device {env.get('gpu', args.device)}, "
        f"started {env['started']}, wall {extra.get('wall_s')} s",
    ]
    if extra.get("stopped"):
        head.append(f"- {extra['stopped']}")
    if extra.get("errors"):
        head.append(f"- errors: {len(extra['errors'])} (see decode_bench.json)")
    md = "\n".join(head) + "\n\n" + notes + "\n\n" + table + "\n"
    with open(os.path.join(args.out, "decode_bench.md"), "w") as f:
        f.write(md)
    return notes + "\n\n" + table


# ---------------------------------------------------------------------------- main


def run_config(g: Group, qlen: int, ragged: bool, args: argparse.Namespace, timer: Timer,
               msa: Any, errors: list) -> dict:
    seed = args.seed + 7919 * g.ctx // BS + 131 * g.batch + 17 * qlen + int(ragged)
    row: dict = {"ctx": g.ctx, "B": g.batch, "qlen": qlen, "ragged": ragged,
                 "dtype": g.dtype_name}
    tag = f"ctx={fmt_ctx(g.ctx)} B={g.batch} qlen={qlen} {'ragged' if ragged else 'uniform'} " \
          f"{g.dtype_name}"
    cfg = None
    try:
        cfg = Config(g, qlen, ragged, seed, msa, args.batch_invariant)
        row["seq_lens"] = {"min": min(cfg.lens_host), "max": max(cfg.lens_host),
                           "sum": sum(cfg.lens_host)}
        if len(cfg.lens_host) <= 16:
            row["seq_lens"]["all"] = cfg.lens_host
        for _ in range(2):
            cfg.stages["step"]()
        if g.device == "cuda":
            torch.cuda.synchronize()
        row["check"] = cfg.check()
        row["bytes"] = cfg.bytes_model()
        times: dict = {}
        for name in ("insert", "index", "attn", "step"):
            times[name] = timer.measure(cfg.stages[name])
        row["times"] = times
        step = times["step"]["median_us"]
        nbytes = row["bytes"]["bytes"]
        row["floor_us"] = nbytes / HBM_BYTES_PER_S * 1e6
        row["target_us"] = TARGET_FACTOR * row["floor_us"] + TARGET_LATENCY_US
        row["step_over_target"] = step / row["target_us"]
        row["step_over_floor"] = step / row["floor_us"]
        row["achieved_GBps"] = nbytes / (step * 1e-6) / 1e9
        row["index_GBps"] = row["bytes"]["index_bytes"] / (times["index"]["median_us"] * 1e-6) / 1e9
        row["attn_GBps"] = row["bytes"]["attn_bytes"] / (times["attn"]["median_us"] * 1e-6) / 1e9
        if int(cfg.flags.item()) and row["check"]["ok"]:
            row["check"]["label"] = f"FAIL flags {int(cfg.flags.item())}"
    except Exception as e:  # noqa: BLE001
        row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        errors.append(f"{tag}: {row['error']}")
        traceback.print_exc()
    if cfg is not None and "times" in row and args.peers != "none":
        try:
            row["sdpa"] = sdpa_peer(cfg, timer)
        except Exception as e:  # noqa: BLE001
            row["sdpa"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            errors.append(f"{tag} sdpa: {row['sdpa']['error']}")
            traceback.print_exc()
        eligible = (args.peers == "all" and g.dtype_name == "bf16" and qlen == 1
                    and g.batch in args.composite_batches_l
                    and g.ctx in args.composite_contexts_l)
        if eligible and args.time_budget - elapsed() < args.composite_reserve:
            row["composite"] = {"skipped": "time budget"}
        elif eligible:
            try:
                opts = (args.flex_options_l if g.batch <= args.flex_tune_max_batch
                        else args.flex_options_l[:1])
                row["composite"] = composite_peer(cfg, timer, opts)
            except Exception as e:  # noqa: BLE001
                row["composite"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                errors.append(f"{tag} composite: {row['composite']['error']}")
                traceback.print_exc()
    del cfg
    if g.device == "cuda":
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
    r = table_row(row)
    log(f"[{elapsed():6.1f}s] {tag}: insert {r[5]} index {r[6]} attn {r[7]} step {r[8]} us, "
        f"{r[9]} MB, {r[10]} GB/s, step/target {r[13]}, SDPA {r[14]}, comp {r[15]}, {r[18]}")
    return row


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        log("--device cuda: no CUDA device visible (use --device cpu --tiny to test)")
        return 2
    try:
        import msa
    except Exception as e:  # noqa: BLE001
        log(f"cannot import msa ({e}); install it: pip install --no-build-isolation ./python")
        return 2
    if args.device == "cuda" and not msa.built_with_cuda():
        log("the installed msa package has no CUDA backend (rebuild with MSA_WITH_CUDA=1)")
        return 2
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    env = environment(args, msa)
    log(json.dumps(env, default=str))
    timer = Timer(args.device, args.iters, args.warmup, args.flush)
    rows: list = []
    errors: list = []
    extra: dict = {"errors": errors}
    plan = [(c, b, d, rg, q) for c in args.contexts for b in args.batches for d in args.dtypes
            for rg in args.raggeds for q in args.qlens]
    done = 0
    stopped = None
    for ctx in args.contexts:
        for batch in args.batches:
            for dname in args.dtypes:
                if stopped:
                    break
                if elapsed() > args.time_budget:
                    stopped = (f"time budget {args.time_budget:.0f} s reached: "
                               f"{len(plan) - done} of {len(plan)} configurations not run")
                    break
                group = None
                try:
                    t = time.time()
                    group = Group(ctx, batch, dname, args.device,
                                  args.seed + ctx // BS + 1000 * batch)
                    gib = (group.kv.numel() * group.kv_elem
                           + group.index.numel() * group.index_elem) / 2**30
                    log(f"[{elapsed():6.1f}s] caches ctx={fmt_ctx(ctx)} B={batch} {dname}: "
                        f"{gib:.2f} GiB in {time.time() - t:.1f} s")
                except Exception as e:  # noqa: BLE001
                    errors.append(f"caches ctx={ctx} B={batch} {dname}: {type(e).__name__}: "
                                  f"{str(e)[:300]}")
                    log("ERROR", errors[-1])
                    done += len(args.raggeds) * len(args.qlens)
                    group = None
                if group is not None:
                    for rg in args.raggeds:
                        for q in args.qlens:
                            if elapsed() > args.time_budget:
                                stopped = (f"time budget {args.time_budget:.0f} s reached: "
                                           f"{len(plan) - done} of {len(plan)} configurations "
                                           "not run")
                                break
                            rows.append(run_config(group, q, rg, args, timer, msa, errors))
                            done += 1
                            extra["wall_s"] = round(elapsed(), 1)
                            write_outputs(args, env, rows, extra)
                        if stopped:
                            break
                del group
                gc.collect()
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    extra["wall_s"] = round(elapsed(), 1)
    if stopped:
        extra["stopped"] = stopped
        extra["not_run"] = [
            {"ctx": c, "B": b, "dtype": d, "ragged": rg, "qlen": q} for (c, b, d, rg, q) in plan
            if not any(r["ctx"] == c and r["B"] == b and r["dtype"] == d and r["ragged"] == rg
                       and r["qlen"] == q for r in rows)]
        log(stopped)
    text = write_outputs(args, env, rows, extra)
    log(f"done in {extra['wall_s']} s, {len(rows)} configurations, {len(errors)} errors; "
        f"wrote {os.path.join(args.out, 'decode_bench.md')} and decode_bench.json")
    for e in errors:
        log("ERROR", e)
    log("")
    log(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
