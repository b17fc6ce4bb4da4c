"""A decode step (metadata, index top-k, sparse attention) captured in a CUDA graph and
replayed with changed batch contents, checked against msa.reference after every replay."""

from __future__ import annotations

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; the msa Python tests need it")
msa = pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")

from _msa_testlib import assert_close, assert_topk_valid, generator, randn  # noqa: E402
from msa import reference as ref  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not msa.built_with_cuda(),
    reason="CUDA graph capture needs a GPU and an msa build with the CUDA backend",
)

R, L, MAX_CONTEXT, HQ, HKV, D = 4, 2, 4096, 16, 1, 128


def test_capture_and_replay() -> None:
    device = "cuda"
    caps = msa.Capacities(max_requests=R, max_tokens=R * L, max_context=MAX_CONTEXT,
                          max_decode_query_len=L, num_q_heads=HQ, num_kv_heads=HKV,
                          num_index_heads=HKV)
    bufs = msa.allocate_buffers(caps, device, out_dtype=torch.float32)  # q bf16, out f32
    kv, index_cache = msa.allocate_caches(caps, device)
    gen = generator(11)
    kv.copy_(randn(*kv.shape, gen=gen))
    index_cache.copy_(randn(*index_cache.shape, gen=gen))
    mb = caps.max_blocks_per_request
    # Static inputs the graph reads; each replay gets new contents.
    query_lens = torch.full((R,), L, dtype=torch.int32, device=device)
    seq_lens = torch.zeros(R, dtype=torch.int32, device=device)
    block_table = torch.zeros(R, mb, dtype=torch.int32, device=device)
    index_q = torch.zeros(R * L, HKV, D, dtype=torch.bfloat16, device=device)
    q = torch.zeros(R * L, HQ, D, dtype=torch.bfloat16, device=device)
    out = bufs.attn_out

    def step() -> None:
        msa.batch_metadata(query_lens=query_lens, seq_lens=seq_lens, block_table=block_table,
                           num_decode_requests=R, decode_query_len=L,
                           slot_mapping=bufs.slot_mapping, totals=bufs.totals,
                           error_flags=bufs.error_flags, workspace=bufs.workspace)
        msa.index_topk_decode(index_q=index_q, index_cache=index_cache, block_table=block_table,
                              seq_lens=seq_lens, topk_out=bufs.topk, query_len=L,
                              error_flags=bufs.error_flags, workspace=bufs.workspace)
        msa.sparse_attention_decode(q=q, kv_cache=kv, block_table=block_table,
                                    seq_lens=seq_lens, topk=bufs.topk, out=out, lse=bufs.lse,
                                    query_len=L, error_flags=bufs.error_flags,
                                    workspace=bufs.workspace)

    def fill(seed: int, lens: list[int]) -> None:
        g = generator(seed)
        seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        query_lens.copy_(torch.tensor([L if s else 0 for s in lens], dtype=torch.int32))
        block_table.copy_(torch.randperm(caps.cache_blocks, generator=g)[: R * mb].view(R, mb))
        index_q.copy_(randn(R * L, HKV, D, gen=g))
        q.copy_(randn(R * L, HQ, D, gen=g))

    fill(0, [MAX_CONTEXT] * R)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    for seed, lens in [(1, [130, 4000, 0, 2049]), (2, [2, 0, 0, 1500]), (3, [4096, 777, 3, 300])]:
        fill(seed, lens)
        graph.replay()
        torch.cuda.synchronize()
        rows = ref.decode_rows(seq_lens.cpu(), L)
        want_topk = ref.index_topk(index_q, index_cache, block_table, seq_lens, rows)
        scores = ref.block_scores(index_q, index_cache, block_table, seq_lens, rows)
        assert_topk_valid(bufs.topk[:, : R * L], want_topk, scores, 16)
        want_out, want_lse = ref.sparse_attention_decode(
            q=q, kv_cache=kv, block_table=block_table, seq_lens=seq_lens,
            topk=bufs.topk[:, : R * L], query_len=L)
        assert_close(out, want_out, atol=2e-3, rtol=2e-2, what=f"replay {seed} out")
        assert_close(bufs.lse, want_lse, atol=2e-3, rtol=1e-3, what=f"replay {seed} lse")
        assert int(bufs.error_flags.item()) == 0
