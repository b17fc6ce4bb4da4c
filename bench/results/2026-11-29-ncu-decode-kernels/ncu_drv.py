# Runs the index and attention stages of a few decode configurations eagerly (for ncu).
import sys, torch
sys.path.insert(0, "bench")
import decode_bench as db
import msa
for ctx, b, dt, q in [(8192, 64, "bf16", 1), (8192, 16, "bf16", 1), (8192, 64, "fp8", 1)]:
    g = db.Group(ctx, b, dt, "cuda", 1)
    cfg = db.Config(g, q, False, 1, msa)
    for _ in range(2):
        cfg.stages["index"](); cfg.stages["attn"]()
    torch.cuda.synchronize()
    print("done", ctx, b, dt, q, flush=True)
    del cfg, g
