"""Cold (L2 flushed) vs warm vs code-warm stage times: does instruction fetch dominate small calls?"""
import sys, torch
sys.path.insert(0, "bench")
import decode_bench as db
import msa

timer = db.Timer("cuda", 30, 3, "read")
def med(xs):
    xs = sorted(xs); return xs[len(xs) // 2]
def run(graph, pre, iters=30):
    ts = []
    for _ in range(iters + 3):
        pre()
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); graph.replay(); e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return med(ts[3:])
gw = db.Group(8192, 1, "bf16", "cuda", 7)
cw = db.Config(gw, 1, False, 7, msa)
for ctx, b, dt in [(8192, 1, "bf16"), (131072, 1, "bf16"), (8192, 16, "bf16"), (8192, 1, "fp8")]:
    g = db.Group(ctx, b, dt, "cuda", 1)
    cfg = db.Config(g, 1, False, 1, msa)
    if dt != "bf16":
        gw2 = db.Group(8192, 1, dt, "cuda", 7); cw2 = db.Config(gw2, 1, False, 7, msa)
    else:
        cw2 = cw
    for st in ("insert", "index", "attn", "step"):
        graph = db.Timer.capture(cfg.stages[st])
        wgraph = db.Timer.capture(cw2.stages[st])
        cold = run(graph, timer.evict)
        warm = run(graph, lambda: None)
        def codewarm():
            timer.evict(); wgraph.replay()
        cwarm = run(graph, codewarm)
        print(f"ctx {ctx:6d} B {b:2d} {dt} {st:6s}: cold {cold:6.1f}  code-warm {cwarm:6.1f}  warm {warm:6.1f}", flush=True)
    del cfg, g
    torch.cuda.empty_cache()
