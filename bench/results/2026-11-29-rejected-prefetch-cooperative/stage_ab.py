import os, sys, torch
sys.path.insert(0, "bench")
import decode_bench as db
import msa
cfgs = [(8192, 1, "bf16", 1), (8192, 4, "bf16", 1), (8192, 16, "bf16", 1), (8192, 64, "bf16", 1), (32768, 16, "bf16", 1),
        (131072, 1, "bf16", 1), (131072, 16, "bf16", 1), (131072, 64, "bf16", 1), (8192, 16, "bf16", 4), (8192, 1, "fp8", 1)]
variants = sys.argv[1].split(",")
stages = sys.argv[2].split(",") if len(sys.argv) > 2 else ["index", "attn", "step"]
timer = db.Timer("cuda", 30, 5, "read")
print("ctx B dt q | stage: us per MSA_X_FUSE=" + " ".join(variants) + " (x2)", flush=True)
for ctx, b, dt, q in cfgs:
    g = db.Group(ctx, b, dt, "cuda", 1)
    cfg = db.Config(g, q, False, 1, msa)
    line = f"{ctx:7d} {b:3d} {dt} q{q} |"
    for st in stages:
        res = []
        for rep in range(2):
            for v in variants:
                os.environ["MSA_X_FUSE"] = v
                res.append(timer.measure(cfg.stages[st])["median_us"])
        line += f" {st}: " + " ".join(f"{x:6.1f}" for x in res) + " |"
    print(line, flush=True)
    del cfg, g
    torch.cuda.empty_cache()
