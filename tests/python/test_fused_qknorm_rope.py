"""msa.fused_qknorm_rope against msa.reference.fused_qknorm_rope (spec A6, A7, A11)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; the msa Python tests need it")
msa = pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")

from _msa_testlib import (  # noqa: E402
    BLOCK, DEVICES, assert_close, generator, make_kv_cache, make_scales, randn)
from msa import reference as ref  # noqa: E402

NQ, NKV, NIQ, D, DI = 4, 2, 2, 128, 128
NUM_BLOCKS, MAX_POS, T = 6, 4096, 9


def make_case(device: str, mode: str, layout: str, cache_dtype: torch.dtype, scale_mode: str,
              index_dtype: torch.dtype, separate_outputs: bool, seed: int = 0) -> dict:
    gen = generator(seed)
    width = (NQ + 2 * NKV + NIQ) * D + DI
    positions = torch.randint(0, MAX_POS, (T,), generator=gen)
    positions[3] = -1  # a padding row
    slots = torch.randperm(NUM_BLOCKS * BLOCK, generator=gen)[:T]
    slots[5] = -7  # skip this row's insert
    index_slots = torch.roll(slots, 1)
    k_scale, v_scale = make_scales(scale_mode, NKV, NUM_BLOCKS, gen, device)
    case = dict(
        qkv=randn(T, width, gen=gen, device=device, scale=2.0),
        positions=positions.to(device),
        cos_sin_cache=ref.rope_cos_sin(MAX_POS, 64, 5e6).to(device),
        q_norm_weight=randn(D, gen=gen, device=device, scale=0.1),
        k_norm_weight=randn(D, gen=gen, device=device, scale=0.1),
        num_q_heads=NQ,
        num_kv_heads=NKV,
        mode=mode,
        num_index_heads=NIQ,
        rotary_dim=64,
        eps=1e-6,
        index_q_norm_weight=randn(DI, gen=gen, device=device, scale=0.1),
        index_k_norm_weight=randn(DI, gen=gen, device=device, scale=0.1),
        slot_mapping=slots.to(device),
        kv_cache=make_kv_cache(layout, NUM_BLOCKS, NKV, D, cache_dtype, gen, device),
        k_scale=k_scale,
        v_scale=v_scale,
        index_slot_mapping=index_slots.to(device),
        index_cache=randn(NUM_BLOCKS, BLOCK, DI, gen=gen, dtype=index_dtype, device=device),
    )
    if mode == "dense":  # dense layers have no index cache; skip_index passes it through
        del case["index_slot_mapping"], case["index_cache"]
    if separate_outputs:
        case["q_out"] = torch.zeros(T, NQ, D, dtype=torch.bfloat16, device=device)
        if mode == "sparse":
            case["index_q_out"] = torch.zeros(T, NIQ, DI, dtype=index_dtype, device=device)
    return case


def check_against_reference(case: dict) -> None:
    want = ref.fused_qknorm_rope(**case)
    msa.fused_qknorm_rope(**case)
    what = f"mode={case['mode']}"
    # k and index_k are rewritten in place (1 bf16 ulp of the fp32 result); v never changes.
    assert_close(case["qkv"].float(), want.qkv.float(), atol=2e-2, rtol=2e-2, what=what + " qkv")
    v = slice(NQ * D + NKV * D, (NQ + 2 * NKV) * D)
    assert torch.equal(case["qkv"][:, v].cpu(), want.qkv[:, v].cpu())
    kv, kv_want = case["kv_cache"], want.kv_cache
    if kv.dtype == torch.float8_e4m3fn:
        # fp8 values may differ by one e4m3 ulp (2^-3 relative) when rounding from fp32.
        assert_close(kv.float(), kv_want.float(), atol=2e-2, rtol=0.13, what=what + " kv_cache")
    else:
        assert_close(kv.float(), kv_want.float(), atol=2e-2, rtol=2e-2, what=what + " kv_cache")
    if case.get("index_cache") is not None:
        ic, ic_want = case["index_cache"], want.index_cache
        assert_close(ic.float(), ic_want.float(), atol=2e-2, rtol=0.13, what=what + " index_cache")
        if case["mode"] != "sparse":
            assert torch.equal(ic.view(torch.uint8).cpu(), ic_want.view(torch.uint8).cpu())
    for name in ("q_out", "index_q_out"):
        if case.get(name) is not None:
            got, exp = case[name], getattr(want, name)
            assert_close(got.float(), exp.float(), atol=2e-2, rtol=0.13, what=f"{what} {name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["dense", "sparse", "skip_index"])
@pytest.mark.parametrize("separate_outputs", [False, True])
def test_modes(device: str, mode: str, separate_outputs: bool) -> None:
    check_against_reference(
        make_case(device, mode, "packed", torch.bfloat16, "none", torch.bfloat16,
                  separate_outputs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["packed", "nhd", "hnd"])
@pytest.mark.parametrize("cache", ["bf16", "fp8-layer", "fp8-token-head"])
def test_cache_layouts_and_fp8(device: str, layout: str, cache: str) -> None:
    dtype = torch.bfloat16 if cache == "bf16" else torch.float8_e4m3fn
    scale_mode = {"bf16": "none", "fp8-layer": "layer", "fp8-token-head": "token-head"}[cache]
    check_against_reference(
        make_case(device, "sparse", layout, dtype, scale_mode, torch.float8_e4m3fn, True,
                  seed=1))


@pytest.mark.parametrize("device", DEVICES)
def test_rope_cache(device: str) -> None:
    table = msa.make_rope_cache(1 << 20, 64, theta=5e6, device=device)
    want = ref.rope_cos_sin(1 << 20, 64, 5e6)
    assert_close(table, want, atol=1e-6, what="cos_sin")


BAD_Q_OUT = {
    "heads": dict(shape=(T, NQ + 1, D), dtype=torch.bfloat16),  # library check (Status)
    "dtype": dict(shape=(T, NQ, D), dtype=torch.float64),  # glue: no msa dtype
}


@pytest.mark.parametrize("bad", sorted(BAD_Q_OUT))
@pytest.mark.parametrize("workspace", ["sized", "given"])
def test_invalid_argument_raises_value_error(bad: str, workspace: str) -> None:
    """Each rejected call builds its own case (no state shared with other tests or calls).
    workspace "sized": the wrapper sizes one (the error comes from the workspace query);
    "given": a workspace is passed, so the error comes from the torch.ops.msa kernel."""
    case = make_case("cpu", "sparse", "packed", torch.bfloat16, "none", torch.bfloat16, True)
    spec = BAD_Q_OUT[bad]
    case["q_out"] = torch.zeros(*spec["shape"], dtype=spec["dtype"])
    if workspace == "given":
        case["workspace"] = torch.zeros(1 << 16, dtype=torch.uint8)
    qkv_before = case["qkv"].clone()
    with pytest.raises(ValueError, match="q_out"):
        msa.fused_qknorm_rope(**case)
    assert torch.equal(case["qkv"], qkv_before)  # rejected before anything is written
