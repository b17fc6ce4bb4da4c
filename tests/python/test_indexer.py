"""msa.index_topk_decode / index_topk_prefill / sparse_page16 against msa.reference
(spec A2-A4, A8, A10, A12)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; the msa Python tests need it")
msa = pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")

from _msa_testlib import (  # noqa: E402
    BLOCK, DEVICES, assert_topk_valid, generator, paged_block_table, randn)
from msa import reference as ref  # noqa: E402

H, DI, CAPACITY = 2, 128, 16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("query_len,seq_lens", [
    (1, [130, 2600, 1, 1000]),
    (4, [0, 2200, 257, 0, 700]),  # zero-length padded requests
])
@pytest.mark.parametrize("index_dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("topk", [16, 4])
def test_index_topk_decode(device: str, query_len: int, seq_lens: list[int],
                           index_dtype: torch.dtype, topk: int) -> None:
    gen = generator(len(seq_lens) + topk)
    num_blocks = 64
    table = paged_block_table(seq_lens, num_blocks, gen, device)
    cache = randn(num_blocks, BLOCK, DI, gen=gen, dtype=index_dtype, device=device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    t = len(seq_lens) * query_len
    index_q = randn(t, H, DI, gen=gen, dtype=index_dtype, device=device)
    out = torch.full((H, t + 3, CAPACITY), 77, dtype=torch.int32, device=device)
    msa.index_topk_decode(index_q=index_q, index_cache=cache, block_table=table, seq_lens=lens,
                          topk_out=out, query_len=query_len, topk=topk)
    rows = ref.decode_rows(lens.cpu(), query_len)
    want = ref.index_topk(index_q, cache, table, lens, rows, topk=topk, capacity=CAPACITY)
    scores = ref.block_scores(index_q, cache, table, lens, rows)
    assert_topk_valid(out[:, :t], want, scores, topk)
    assert bool((out[:, t:] == 77).all()), "rows past T must be left unchanged"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_index_topk_prefill(device: str, index_dtype: torch.dtype) -> None:
    gen = generator(7)
    q_lens, prefixes = [65, 129, 40], [0, 1024, 2100]
    seq_lens = [q + p for q, p in zip(q_lens, prefixes)]
    num_blocks = 64
    table = paged_block_table(seq_lens, num_blocks, gen, device)
    cache = randn(num_blocks, BLOCK, DI, gen=gen, dtype=index_dtype, device=device)
    cu = torch.tensor([0, 65, 194, 234], dtype=torch.int32, device=device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    t = 240  # 6 padding rows past cu[B]
    index_q = randn(t, H, DI, gen=gen, dtype=index_dtype, device=device)
    # The prefill rows follow 5 decode rows in a shared buffer.
    buffer = torch.full((H, 5 + t, CAPACITY), 77, dtype=torch.int32, device=device)
    msa.index_topk_prefill(index_q=index_q, index_cache=cache, block_table=table,
                           cu_seqlens_q=cu, seq_lens=lens, topk_out=buffer[:, 5:])
    rows = ref.prefill_rows(cu.cpu(), lens.cpu(), t)
    want = ref.index_topk(index_q, cache, table, lens, rows)
    scores = ref.block_scores(index_q, cache, table, lens, rows)
    assert_topk_valid(buffer[:, 5:], want, scores, 16)
    assert bool((buffer[:, :5] == 77).all()), "decode rows of the shared buffer were touched"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_stride", [8, 16])
@pytest.mark.parametrize("hkv", [1, 2])
def test_sparse_page16(device: str, page_stride: int, hkv: int) -> None:
    gen = generator(hkv * page_stride)
    query_len, seq_lens = 2, [0, 700, 2500, 129]
    table = paged_block_table(seq_lens, 64, gen, device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    rows = ref.decode_rows(lens.cpu(), query_len)
    topk = ref.index_topk(
        randn(len(rows), hkv, DI, gen=gen, device=device),
        randn(64, BLOCK, DI, gen=gen, device=device), table, lens, rows).to(device)
    t = len(rows)
    table_out = torch.full((t * hkv, CAPACITY * BLOCK // 16), -5, dtype=torch.int32,
                           device=device)
    ctx = torch.full((t * hkv,), -5, dtype=torch.int32, device=device)
    msa.sparse_page16(topk=topk, block_table=table, seq_lens=lens, table_out=table_out,
                      context_lens_out=ctx, query_len=query_len, page_stride=page_stride)
    want_table, want_ctx = ref.sparse_page16(topk=topk.cpu(), block_table=table.cpu(),
                                             seq_lens=lens.cpu(), query_len=query_len,
                                             page_stride=page_stride)
    assert torch.equal(table_out.cpu(), want_table)
    assert torch.equal(ctx.cpu(), want_ctx)
