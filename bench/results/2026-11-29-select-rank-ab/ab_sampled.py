import os, sys, torch
sys.path.insert(0, "bench")
import decode_bench as db
import msa
var, variants, stages, which = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), sys.argv[4]
allc = {"wide": [(131072, 1, "bf16", 1), (131072, 4, "bf16", 1), (131072, 16, "bf16", 1), (131072, 64, "bf16", 1), (524288, 1, "bf16", 1),
                 (524288, 16, "bf16", 1), (131072, 1, "fp8", 1), (131072, 16, "bf16", 4)],
        "attn": [(8192, 1, "bf16", 1), (8192, 4, "bf16", 1), (8192, 16, "bf16", 1), (8192, 64, "bf16", 1), (8192, 1, "bf16", 4),
                 (8192, 16, "bf16", 4), (8192, 1, "fp8", 1), (8192, 16, "fp8", 1)]}
timer = db.Timer("cuda", 30, 5, "read")
print(f"ctx B dt q | stage: us per {var}=" + " ".join(variants) + " (x2)", flush=True)
for ctx, b, dt, q in allc[which]:
    g = db.Group(ctx, b, dt, "cuda", 1)
    cfgs = {}
    for v in variants:  # the variable is set while the config (and its workspaces) is built
        os.environ[var] = v
        cfgs[v] = db.Config(g, q, False, 1, msa)
    line = f"{ctx:7d} {b:3d} {dt} q{q} |"
    for st in stages:
        res = []
        for rep in range(2):
            for v in variants:
                os.environ[var] = v
                res.append(timer.measure(cfgs[v].stages[st])["median_us"])
        line += f" {st}: " + " ".join(f"{x:6.1f}" for x in res) + " |"
    print(line, flush=True)
    del cfgs, g
    torch.cuda.empty_cache()
