import sys, collections, torch
sys.path.insert(0, "bench")
import decode_bench as db
import msa
from torch.profiler import profile, ProfilerActivity
cfgs = [(8192, 1, "bf16", 1), (8192, 16, "bf16", 1), (131072, 1, "bf16", 1), (131072, 64, "bf16", 1)]
timer = db.Timer("cuda", 20, 3, "read")
for ctx, b, dt, q in cfgs:
    g = db.Group(ctx, b, dt, "cuda", 1)
    cfg = db.Config(g, q, False, 1, msa)
    out = [f"ctx {ctx} B {b} {dt} q{q}:"]
    for st in ("index", "attn", "step"):
        t_read = timer.measure(cfg.stages[st])["median_us"]
        graph = db.Timer.capture(cfg.stages[st])
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                timer.evict(); graph.replay()
            torch.cuda.synchronize()
        agg = collections.defaultdict(list)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and "reduce" not in e.name.lower() and "Memset" not in e.name:
                agg[e.name.split("(")[0][-28:]].append(e.device_time)
        ks = ", ".join(f"{k}={sum(v)/len(v):.1f}" for k, v in agg.items())
        out.append(f"  {st}: {t_read:.1f} us | {ks}")
    print("\n".join(out), flush=True)
    del cfg, g
    torch.cuda.empty_cache()
