"""Shared case builders and checks of the msa Python tests (imported after importorskip)."""

from __future__ import annotations

import math
from typing import Optional

import pytest
import torch

import msa
from msa import reference as ref

BLOCK = 128
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            not torch.cuda.is_available() or not msa.built_with_cuda(),
            reason="CUDA tests need a GPU and an msa build with the CUDA backend",
        ),
    ),
]


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, gen: torch.Generator, dtype: torch.dtype = torch.bfloat16,
          device: str = "cpu", scale: float = 1.0) -> torch.Tensor:
    x = torch.randn(*shape, generator=gen) * scale
    if dtype == torch.float8_e4m3fn:
        return ref.to_e4m3(x).to(device)
    return x.to(dtype).to(device)


def paged_block_table(seq_capacity: list[int], num_blocks: int, gen: torch.Generator,
                      device: str) -> torch.Tensor:
    """[B, max_blocks] int32: distinct pages in a shuffled (non-identity) order."""
    per_request = [max(1, math.ceil(s / BLOCK)) for s in seq_capacity]
    max_blocks = max(per_request)
    assert sum(per_request) <= num_blocks
    pages = torch.randperm(num_blocks, generator=gen).tolist()
    table = torch.zeros(len(seq_capacity), max_blocks, dtype=torch.int32)
    used = 0
    for b, n in enumerate(per_request):
        table[b, :n] = torch.tensor(pages[used:used + n], dtype=torch.int32)
        used += n
    return table.to(device)


def make_kv_cache(layout: str, num_blocks: int, hkv: int, d: int, dtype: torch.dtype,
                  gen: torch.Generator, device: str) -> torch.Tensor:
    """Random main cache in one of vLLM's layouts: packed [nb, Hkv, 128, 2D], split NHD
    [nb, 2, 128, Hkv, D], or split HND (the NHD logical shape with permuted strides)."""
    if layout == "packed":
        return randn(num_blocks, hkv, BLOCK, 2 * d, gen=gen, dtype=dtype, device=device)
    if layout == "nhd":
        return randn(num_blocks, 2, BLOCK, hkv, d, gen=gen, dtype=dtype, device=device)
    assert layout == "hnd"
    physical = randn(num_blocks, 2, hkv, BLOCK, d, gen=gen, dtype=dtype, device=device)
    return physical.permute(0, 1, 3, 2, 4)


def make_scales(mode: str, hkv: int, num_blocks: int, gen: torch.Generator,
                device: str) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    if mode == "none":
        return None, None
    if mode == "layer":
        return (torch.tensor([0.25], device=device), torch.tensor([0.5], device=device))
    shape = (hkv, num_blocks * BLOCK)
    k = (torch.rand(*shape, generator=gen) * 0.5 + 0.1).to(device)
    v = (torch.rand(*shape, generator=gen) * 0.5 + 0.1).to(device)
    return k, v


def random_topk(rows: list[ref.Row], heads: int, capacity: int, gen: torch.Generator,
                block: int = BLOCK) -> torch.Tensor:
    """Valid top-k rows: a random subset of the visible blocks that holds the own block,
    ascending, -1 padded; padding rows all -1."""
    out = torch.full((heads, len(rows), capacity), -1, dtype=torch.int32)
    for t, row in enumerate(rows):
        if row.position < 0:
            continue
        own = row.position // block
        for h in range(heads):
            others = torch.randperm(own, generator=gen)[: capacity - 1].tolist()
            ids = sorted(others + [own])
            out[h, t, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
    return out


def assert_topk_valid(got: torch.Tensor, want: torch.Tensor, scores: list[torch.Tensor],
                      topk: int, tol: float = 1e-3) -> None:
    """got equals the reference selection, except that blocks whose scores are within `tol`
    of the selection boundary may be exchanged (fp32 accumulation order)."""
    got, want = got.cpu(), want.cpu()
    assert got.shape == want.shape
    for t, s in enumerate(scores):
        for h in range(got.shape[0]):
            g, w = got[h, t].tolist(), want[h, t].tolist()
            if g == w:
                continue
            n = len([x for x in w if x >= 0])
            assert g[n:] == [-1] * (len(g) - n), f"row {t} head {h}: not -1 padded: {g}"
            ids = g[:n]
            assert ids == sorted(ids) and len(set(ids)) == n, f"row {t} head {h}: {g}"
            nvb = s.shape[1]
            assert nvb - 1 in ids, f"row {t} head {h}: own block missing from {g}"
            chosen = [b for b in ids if b != nvb - 1]
            rest = [b for b in range(nvb) if b not in ids]
            if chosen and rest:
                low = min(float(s[h, b]) for b in chosen)
                high = max(float(s[h, b]) for b in rest)
                assert low >= high - tol, (
                    f"row {t} head {h}: selected {g}, reference {w}, boundary {low} < {high}")


def assert_close(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float = 0.0,
                 what: str = "") -> None:
    torch.testing.assert_close(got.cpu().double(), want.cpu().double(), atol=atol, rtol=rtol,
                               equal_nan=True, msg=lambda m: f"{what}: {m}")
