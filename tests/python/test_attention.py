"""msa.sparse_attention_decode / sparse_attention_prefill / dense_attention against
msa.reference (spec A5-A8)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; the msa Python tests need it")
msa = pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")

from _msa_testlib import (  # noqa: E402
    DEVICES, assert_close, generator, make_kv_cache, make_scales, paged_block_table, random_topk,
    randn)
from msa import reference as ref  # noqa: E402

HQ, HKV, D, CAPACITY, NUM_BLOCKS = 4, 2, 128, 16, 48
CACHES = [
    ("packed", torch.bfloat16, "none"),
    ("nhd", torch.bfloat16, "none"),
    ("hnd", torch.bfloat16, "none"),
    ("packed", torch.float8_e4m3fn, "layer"),
    ("packed", torch.float8_e4m3fn, "token-head"),
    ("hnd", torch.float8_e4m3fn, "token-head"),
]


def cache_case(device: str, layout: str, dtype: torch.dtype, scale_mode: str, seed: int):
    gen = generator(seed)
    cache = make_kv_cache(layout, NUM_BLOCKS, HKV, D, dtype, gen, device)
    k_scale, v_scale = make_scales(scale_mode, HKV, NUM_BLOCKS, gen, device)
    return gen, cache, k_scale, v_scale


def check(out, lse, want_out, want_lse, out_dtype) -> None:
    atol = 2e-2 if out_dtype != torch.float32 else 2e-3
    assert_close(out.float(), want_out, atol=atol, rtol=2e-2, what="out")
    assert_close(lse, want_lse, atol=2e-3, rtol=1e-3, what="lse")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout,cache_dtype,scale_mode", CACHES)
@pytest.mark.parametrize("query_len,seq_lens", [(1, [130, 2600, 1]), (4, [0, 1200, 384, 0])])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_sparse_attention_decode(device, layout, cache_dtype, scale_mode, query_len, seq_lens,
                                 out_dtype) -> None:
    gen, cache, k_scale, v_scale = cache_case(device, layout, cache_dtype, scale_mode, 3)
    table = paged_block_table(seq_lens, NUM_BLOCKS, gen, device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    rows = ref.decode_rows(lens.cpu(), query_len)
    t = len(rows)
    q = randn(t, HQ, D, gen=gen, device=device)
    topk = random_topk(rows, HKV, CAPACITY, gen).to(device)
    out = torch.full((t, HQ, D), 9.0, dtype=out_dtype, device=device)
    lse = torch.full((t, HQ), 9.0, dtype=torch.float32, device=device)
    msa.sparse_attention_decode(q=q, kv_cache=cache, block_table=table, seq_lens=lens, topk=topk,
                                out=out, lse=lse, query_len=query_len, k_scale=k_scale,
                                v_scale=v_scale)
    want_out, want_lse = ref.sparse_attention_decode(
        q=q, kv_cache=cache, block_table=table, seq_lens=lens, topk=topk, query_len=query_len,
        k_scale=k_scale, v_scale=v_scale)
    check(out, lse, want_out, want_lse, out_dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout,cache_dtype,scale_mode", CACHES)
def test_sparse_attention_prefill(device, layout, cache_dtype, scale_mode) -> None:
    gen, cache, k_scale, v_scale = cache_case(device, layout, cache_dtype, scale_mode, 4)
    q_lens, prefixes = [65, 129, 17], [0, 1024, 2300]
    seq_lens = [q + p for q, p in zip(q_lens, prefixes)]
    table = paged_block_table(seq_lens, NUM_BLOCKS, gen, device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    cu = torch.tensor([0, 65, 194, 211], dtype=torch.int32, device=device)
    t = 215
    rows = ref.prefill_rows(cu.cpu(), lens.cpu(), t)
    q = randn(t, HQ, D, gen=gen, device=device)
    topk = random_topk(rows, HKV, CAPACITY, gen).to(device)
    out = torch.full((t, HQ, D), 9.0, dtype=torch.bfloat16, device=device)
    lse = torch.full((t, HQ), 9.0, dtype=torch.float32, device=device)
    msa.sparse_attention_prefill(q=q, kv_cache=cache, block_table=table, cu_seqlens_q=cu,
                                 seq_lens=lens, topk=topk, out=out, lse=lse, k_scale=k_scale,
                                 v_scale=v_scale)
    want_out, want_lse = ref.sparse_attention_prefill(
        q=q, kv_cache=cache, block_table=table, cu_seqlens_q=cu, seq_lens=lens, topk=topk,
        k_scale=k_scale, v_scale=v_scale)
    check(out, lse, want_out, want_lse, torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout,cache_dtype,scale_mode", CACHES[:4])
def test_dense_attention(device, layout, cache_dtype, scale_mode) -> None:
    gen, cache, k_scale, v_scale = cache_case(device, layout, cache_dtype, scale_mode, 5)
    q_lens, prefixes = [1, 1, 40], [300, 0, 200]
    seq_lens = [q + p for q, p in zip(q_lens, prefixes)]
    table = paged_block_table(seq_lens, NUM_BLOCKS, gen, device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    cu = torch.tensor([0, 1, 2, 42], dtype=torch.int32, device=device)
    q = randn(42, HQ, D, gen=gen, device=device)
    out = torch.empty(42, HQ, D, dtype=torch.float32, device=device)
    msa.dense_attention(q=q, kv_cache=cache, block_table=table, cu_seqlens_q=cu, seq_lens=lens,
                        out=out, k_scale=k_scale, v_scale=v_scale, softmax_scale=0.05)
    want_out, _ = ref.dense_attention(q=q, kv_cache=cache, block_table=table, cu_seqlens_q=cu,
                                      seq_lens=lens, k_scale=k_scale, v_scale=v_scale,
                                      softmax_scale=0.05)
    assert_close(out, want_out, atol=2e-3, rtol=2e-2, what="out")


def test_sparse_equals_dense_for_short_contexts() -> None:
    """With every visible block selected (contexts <= 16 blocks) sparse equals dense (A5)."""
    gen, cache, _, _ = cache_case("cpu", "packed", torch.bfloat16, "none", 6)
    seq_lens = [900, 2048]
    table = paged_block_table(seq_lens, NUM_BLOCKS, gen, "cpu")
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    rows = ref.decode_rows(lens, 1)
    q = randn(2, HQ, D, gen=gen)
    topk = torch.full((HKV, 2, CAPACITY), -1, dtype=torch.int32)
    for t, row in enumerate(rows):
        n = row.position // 128 + 1
        topk[:, t, :n] = torch.arange(n, dtype=torch.int32)
    sparse = torch.empty(2, HQ, D, dtype=torch.float32)
    dense = torch.empty(2, HQ, D, dtype=torch.float32)
    msa.sparse_attention_decode(q=q, kv_cache=cache, block_table=table, seq_lens=lens, topk=topk,
                                out=sparse)
    msa.dense_attention(q=q, kv_cache=cache, block_table=table,
                        cu_seqlens_q=torch.tensor([0, 1, 2], dtype=torch.int32), seq_lens=lens,
                        out=dense)
    assert_close(sparse, dense, atol=1e-5, what="sparse vs dense")


@pytest.mark.parametrize("device", DEVICES)
def test_batch_invariant_request_alone_and_in_a_batch(device) -> None:
    """batch_invariant=True: a decode request's rows are bitwise the same alone and batched."""
    gen, cache, k_scale, v_scale = cache_case(device, "packed", torch.bfloat16, "none", 7)
    seq_lens = [900, 40, 2100, 0, 333]
    table = paged_block_table(seq_lens, NUM_BLOCKS, gen, device)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    rows = ref.decode_rows(lens.cpu(), 1)
    q = randn(len(rows), HQ, D, gen=gen, device=device)
    topk = random_topk(rows, HKV, CAPACITY, gen).to(device)
    out = torch.empty(len(rows), HQ, D, dtype=torch.float32, device=device)
    lse = torch.empty(len(rows), HQ, dtype=torch.float32, device=device)
    msa.sparse_attention_decode(q=q, kv_cache=cache, block_table=table, seq_lens=lens, topk=topk,
                                out=out, lse=lse, batch_invariant=True)
    for b in range(len(seq_lens)):
        one = torch.empty(1, HQ, D, dtype=torch.float32, device=device)
        one_lse = torch.empty(1, HQ, dtype=torch.float32, device=device)
        msa.sparse_attention_decode(q=q[b:b + 1], kv_cache=cache, block_table=table[b:b + 1],
                                    seq_lens=lens[b:b + 1], topk=topk[:, b:b + 1], out=one,
                                    lse=one_lse, batch_invariant=True)
        assert torch.equal(one, out[b:b + 1]), f"request {b}: out differs"
        assert torch.equal(one_lse, lse[b:b + 1]), f"request {b}: lse differs"
