"""torch.library.opcheck on every msa operator: schema and mutation annotations, fake
(meta) implementations, and AOT dispatch with dynamic shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; the msa Python tests need it")
msa = pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")

from _msa_testlib import BLOCK, DEVICES, generator, paged_block_table, randn  # noqa: E402
from msa import reference as ref  # noqa: E402

NQ, NKV, D = 2, 1, 128


def op_cases(device: str) -> dict[str, tuple]:
    """Positional arguments of each torch.ops.msa op, workspace included."""
    gen = generator(0)
    i32 = dict(dtype=torch.int32, device=device)
    ws = torch.empty(64 << 20, dtype=torch.uint8, device=device)  # ample for these shapes
    seq_lens = [300, 129]
    lens = torch.tensor(seq_lens, **i32)
    table = paged_block_table(seq_lens, 8, gen, device)
    kv = randn(8, NKV, BLOCK, 2 * D, gen=gen, device=device)
    index_cache = randn(8, BLOCK, D, gen=gen, device=device)
    rows = ref.decode_rows(lens.cpu(), 1)
    topk = ref.index_topk(randn(2, NKV, D, gen=gen), index_cache.cpu(), table.cpu(), lens.cpu(),
                          rows).to(device)
    q = randn(2, NQ, D, gen=gen, device=device)
    cu = torch.tensor([0, 1, 2], **i32)
    width = (NQ + 3 * NKV) * D + D
    norm = randn(D, gen=gen, device=device, scale=0.1)
    slots = torch.tensor([5, 300], dtype=torch.int64, device=device)
    flags = torch.zeros(1, **i32)
    return {
        "fused_qknorm_rope": (
            randn(2, width, gen=gen, device=device), torch.tensor([299, 128], device=device),
            ref.rope_cos_sin(512, 64, 5e6).to(device), norm, norm, norm, norm, slots, kv.clone(),
            None, None, None, index_cache.clone(), torch.empty(2, NQ, D, dtype=torch.bfloat16,
                                                               device=device),
            torch.empty(2, NKV, D, dtype=torch.bfloat16, device=device), flags.clone(), ws,
            1, NQ, NKV, NKV, 64, 1e-6),
        "rope_cache": (torch.empty(64, 64, device=device), ws, 5e6),
        "index_topk_decode": (
            randn(2, NKV, D, gen=gen, device=device), index_cache, table, lens,
            torch.empty(NKV, 2, 16, **i32), flags.clone(), ws, 1, 16, 0, 1),
        "index_topk_prefill": (
            randn(2, NKV, D, gen=gen, device=device), index_cache, table, cu, lens,
            torch.empty(NKV, 2, 16, **i32), None, ws, 16, 0, 1),
        "sparse_page16": (
            topk, table, lens, torch.empty(2 * NKV, 128, **i32), torch.empty(2 * NKV, **i32),
            None, ws, 1, 8, 128),
        "sparse_attention_decode": (
            q, kv, None, None, table, lens, topk, torch.empty_like(q),
            torch.empty(2, NQ, device=device), flags.clone(), ws, 1, 0.0),
        "sparse_attention_prefill": (
            q, kv, None, None, table, cu, lens, topk, torch.empty_like(q), None, None, ws, 0.0),
        "dense_attention": (
            q, kv, None, None, table, cu, lens, torch.empty_like(q), None, None, ws, 0.0),
        "batch_metadata": (
            torch.tensor([1, 1], **i32), lens, table, table, torch.empty(3, **i32),
            torch.empty(1, **i32), torch.empty(1, **i32), torch.empty(2, **i32),
            torch.empty(2, **i32), torch.empty(4, **i32), torch.empty(4, **i32),
            torch.empty(4, dtype=torch.int64, device=device),
            torch.empty(4, dtype=torch.int64, device=device), torch.empty(4, **i32), None, ws,
            2, 1, 128),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(op_cases("cpu")))
def test_opcheck(device: str, name: str) -> None:
    # fp8 tensors are left out: opcheck's schema test cannot compare float8 values on the CPU.
    args = op_cases(device)[name]
    torch.library.opcheck(getattr(torch.ops.msa, name).default, args)


def test_every_op_is_checked() -> None:
    assert set(op_cases("cpu")) == set(msa._fake.OP_NAMES)
