"""Drives msa's vLLM plugin steps on a GPU without vLLM (issue 44, item 6).

  record  (a machine with vLLM, CPU): runs vLLM's real MiniMax-M3 layer and metadata builders
          through the plugin's impls for every step of tests/python/_vllm_harness.py (decode,
          chunked prefill, mixed, speculative; bf16 and fp8 caches) and saves each step's
          inputs, vLLM's metadata and the CPU results to one file.
  replay  (the GPU machine: torch + msa built with CUDA, no vLLM): runs the same steps
          (msa.vllm_plugin.steps, what the impls' forward calls) on CUDA with the recorded
          metadata and vLLM-shaped buffers (token-major top-k buffer, uint8 fp8 cache viewed as
          e4m3, 0-dim scales, one workspace sized from the scheduler limits), checks them
          against the CPU results and msa.reference, and writes a JSON record.

    python tests/python/vllm_gpu_driver.py record --out vllm_steps.pt.gz
    python tests/python/vllm_gpu_driver.py replay --cases vllm_steps.pt.gz --out vllm_gpu.json

(.gz: gzip-compressed, ~55 MB instead of ~65.)

This checks the impls' kernels and buffers on CUDA, not vLLM's engine on a GPU: the serving
run (`vllm serve ... --tensor-parallel-size 4`, docs/vllm.md) is not verified by it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import io
import json
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import msa  # noqa: E402
from _msa_testlib import assert_close, assert_topk_valid  # noqa: E402
from msa import reference as ref  # noqa: E402
from msa.vllm_plugin import steps  # noqa: E402

BLOCK, HQ, HKV, D, TOPK = 128, 16, 1, 128, 16  # as tests/python/_vllm_harness.py


def _metadata_dict(md: object) -> dict:
    """vLLM's metadata dataclass as plain values (tensors, ints, nested dicts)."""
    out = {}
    for field in dataclasses.fields(md):
        value = getattr(md, field.name)
        if dataclasses.is_dataclass(value):
            value = _metadata_dict(value)
        if isinstance(value, (torch.Tensor, int, dict)) or value is None:
            out[field.name] = value
    return out


def _namespace(values: dict, device: str) -> types.SimpleNamespace:
    """Recorded metadata as an object with vLLM's field names, tensors on ``device``."""
    def convert(v: object) -> object:
        if isinstance(v, dict):
            return _namespace(v, device)
        return v.to(device) if isinstance(v, torch.Tensor) else v
    return types.SimpleNamespace(**{k: convert(v) for k, v in values.items()})


def record(out: Path) -> int:
    import _vllm_harness as harness
    from msa.vllm_plugin import impl
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    impl._platform_reason = lambda: None  # let the selectors choose msa on this CPU
    harness.init_distributed()
    cases = {}
    for step in sorted(harness.STEPS):
        for cache in ("bf16", "fp8"):
            s = harness.run_step(step, cache)
            cases[f"{step}-{cache}"] = dict(
                query_lens=s.query_lens, seq_lens=s.seq_lens, fp8=s.fp8, kv=s.kv,
                k_scale=s.k_scale, v_scale=s.v_scale, index_cache=s.index_cache,
                table=s.table, index_table=s.index_table, q=s.q, index_q=s.index_q,
                main_md=_metadata_dict(s.main_md), index_md=_metadata_dict(s.index_md),
                topk=s.topk, output=s.output)
            print(f"recorded {step}-{cache}")
    buf = io.BytesIO()
    torch.save(cases, buf)
    # gzip (.gz): the recording travels to the GPU machine inside an upload limit.
    out.write_bytes(gzip.compress(buf.getvalue(), 1) if out.suffix == ".gz" else buf.getvalue())
    print(f"{len(cases)} steps -> {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return 0


def run_case(case: dict, device: str, ws: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The plugin's indexer + attention step on ``device``, in vLLM's buffers."""
    tokens = sum(case["query_lens"])
    main_md = _namespace(case["main_md"], device)
    index_md = _namespace(case["index_md"], device)
    topk_buffer = torch.full(((tokens + 3) // 4 * 4, HKV, TOPK), -1, dtype=torch.int32,
                             device=device)
    kv = case["kv"].to(device)
    fp8 = case["fp8"]
    kv_cache = kv.view(torch.uint8).view(torch.float8_e4m3fn) if fp8 else kv
    output = torch.zeros(tokens, HQ * D, dtype=torch.bfloat16, device=device)
    steps.select_blocks(index_md, index_query=case["index_q"].to(device),
                        index_cache=case["index_cache"].to(device), topk_buffer=topk_buffer,
                        num_index_heads=HKV, index_head_dim=D, topk=TOPK, init_blocks=0,
                        local_blocks=1, workspace=ws)
    steps.attend(main_md, query=case["q"].to(device), output=output, kv_cache=kv_cache,
                 topk_buffer=topk_buffer, num_heads=HQ, head_size=D, scale=D ** -0.5,
                 k_scale=case["k_scale"].to(device) if fp8 else None,
                 v_scale=case["v_scale"].to(device) if fp8 else None, workspace=ws)
    if device != "cpu":
        torch.cuda.synchronize()
    return topk_buffer[:tokens].transpose(0, 1).cpu(), output.cpu()


def replay(cases_path: Path, out: Path, device: str) -> int:
    data = cases_path.read_bytes()
    cases = torch.load(io.BytesIO(gzip.decompress(data) if cases_path.suffix == ".gz" else data))
    caps = msa.Capacities(max_requests=8, max_tokens=512, max_context=4096,
                          max_decode_query_len=3, num_q_heads=HQ, num_kv_heads=HKV,
                          num_index_heads=HKV, topk=TOPK)
    workspaces = {
        dev: torch.empty(max(msa.workspace_bytes(caps, dev, kv_cache_dtype=dt, index_dtype=dt)
                             for dt in (torch.bfloat16, torch.float8_e4m3fn)),
                         dtype=torch.uint8, device=dev)
        for dev in ("cpu", device)}
    results, failed = [], 0
    for name, case in cases.items():
        entry = {"step": name}
        try:
            topk, output = run_case(case, device, workspaces[device])
            cpu_topk, cpu_output = run_case(case, "cpu", workspaces["cpu"])
            tokens = sum(case["query_lens"])
            rows = [ref.Row(b, p) for b, (n, s) in
                    enumerate(zip(case["query_lens"], case["seq_lens"])) for p in range(s - n, s)]
            lens = torch.tensor(case["seq_lens"], dtype=torch.int32)
            iq = case["index_q"].view(tokens, HKV, D)
            want = ref.index_topk(iq, case["index_cache"], case["index_table"], lens, rows,
                                  topk=TOPK, init_blocks=0, local_blocks=1)
            scores = ref.block_scores(iq, case["index_cache"], case["index_table"], lens, rows)
            assert_topk_valid(topk, want, scores, TOPK)
            entry["topk_rows_equal_cpu"] = int((topk == cpu_topk).all(-1).sum())
            entry["topk_rows_equal_recorded"] = int((topk == case["topk"]).all(-1).sum())
            entry["topk_rows"] = int(topk.shape[0] * topk.shape[1])
            scales = dict(k_scale=case["k_scale"], v_scale=case["v_scale"]) if case["fp8"] else {}
            want_out, _ = ref.attention(case["q"].view(tokens, HQ, D), case["kv"], case["table"],
                                        lens, rows, topk=topk, softmax_scale=D ** -0.5, **scales)
            got = output.view(tokens, HQ, D).float()
            assert_close(got, want_out, atol=2e-2, rtol=2e-2, what=f"{name} out vs reference")
            entry["max_abs_diff_vs_reference"] = float((got.double() - want_out).abs().max())
            entry["max_abs_diff_vs_cpu_backend"] = float(
                (got - cpu_output.view(tokens, HQ, D).float()).abs().max())
            entry["ok"] = True
        except Exception as error:  # recorded, and the run fails at the end
            entry.update(ok=False, error=f"{type(error).__name__}: {error}")
            failed += 1
        results.append(entry)
        print(json.dumps(entry))
    record = {"device": torch.cuda.get_device_name() if device != "cpu" else "cpu",
              "torch": torch.__version__, "msa": msa.__version__,
              "msa_built_with_cuda": msa.built_with_cuda(), "steps": results,
              "engine_level_run": "not verified (no vLLM on this machine)"}
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--out", type=Path, default=Path("vllm_steps.pt"))
    rep = sub.add_parser("replay")
    rep.add_argument("--cases", type=Path, default=Path("vllm_steps.pt"))
    rep.add_argument("--out", type=Path, default=Path("vllm_gpu.json"))
    rep.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.mode == "record":
        return record(args.out)
    return replay(args.cases, args.out, args.device)


if __name__ == "__main__":
    sys.exit(main())
