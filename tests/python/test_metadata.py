"""msa.batch_metadata against msa.reference.batch_metadata (spec A8), and the capacity-sized
buffers of msa.Capacities / msa.allocate_buffers."""

from __future__ import annotations

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed; the msa Python tests need it")
msa = pytest.importorskip(
    "msa", reason="the msa package is not built: pip install --no-build-isolation ./python")

from _msa_testlib import DEVICES, generator, paged_block_table  # noqa: E402
from msa import reference as ref  # noqa: E402


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("decode_query_len", [1, 4])
def test_batch_metadata(device: str, decode_query_len: int) -> None:
    gen = generator(decode_query_len)
    # Decodes first (one padded request with query length 0 and seq_len 0), then prefills.
    query_lens = [decode_query_len, 0, decode_query_len, 65, 300]
    seq_lens = [700, 0, 129, 65, 1324]
    nd, b, max_tokens = 3, len(query_lens), 512
    table = paged_block_table(seq_lens, 40, gen, device)
    index_table = paged_block_table(seq_lens, 40, gen, device)
    dev = dict(dtype=torch.int32, device=device)
    out = dict(
        query_start_loc=torch.full((b + 1,), -9, **dev),
        prefill_cu_seqlens_q=torch.full((b - nd + 1,), -9, **dev),
        prefill_cu_seqlens_k=torch.full((b - nd + 1,), -9, **dev),
        context_lens=torch.full((b,), -9, **dev),
        kv_block_counts=torch.full((b,), -9, **dev),
        token_request=torch.full((max_tokens,), -9, **dev),
        token_position=torch.full((max_tokens,), -9, **dev),
        slot_mapping=torch.full((max_tokens,), -9, dtype=torch.int64, device=device),
        index_slot_mapping=torch.full((max_tokens,), -9, dtype=torch.int64, device=device),
        totals=torch.full((4,), -9, **dev),
    )
    msa.batch_metadata(query_lens=torch.tensor(query_lens, **dev),
                       seq_lens=torch.tensor(seq_lens, **dev), block_table=table,
                       index_block_table=index_table, num_decode_requests=nd,
                       decode_query_len=decode_query_len, **out)
    want = ref.batch_metadata(query_lens=torch.tensor(query_lens, dtype=torch.int32),
                              seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
                              block_table=table.cpu(), index_block_table=index_table.cpu(),
                              num_decode_requests=nd, decode_query_len=decode_query_len,
                              max_tokens=max_tokens)
    for name, got in out.items():
        expected = getattr(want, name)
        assert torch.equal(got.cpu(), expected), f"{name}: {got} vs {expected}"


@pytest.mark.parametrize("device", DEVICES)
def test_allocate_buffers(device: str) -> None:
    caps = msa.Capacities(max_requests=8, max_tokens=256, max_context=4096,
                          max_decode_query_len=4)
    assert caps.max_blocks_per_request == 32
    bufs = msa.allocate_buffers(caps, device)
    assert bufs.topk.shape == (1, 256, 16) and bufs.topk.dtype == torch.int32
    assert bufs.q.shape == (256, 16, 128) and bufs.slot_mapping.dtype == torch.int64
    assert bufs.workspace.dtype == torch.uint8
    assert bufs.workspace.numel() == msa.workspace_bytes(caps, device)
    kv, index = msa.allocate_caches(caps, device, kv_cache_dtype=torch.float8_e4m3fn)
    assert kv.shape == (256, 1, 128, 256) and index.shape == (256, 128, 128)


@pytest.mark.parametrize("device", DEVICES)
def test_allocate_buffers_dtypes(device: str) -> None:
    """q follows the activation dtype (bf16 / f16 only, as qkv); attn_out may be float32, and
    the workspace is sized with those dtypes (float32 activations raise ValueError)."""
    caps = msa.Capacities(max_requests=4, max_tokens=8, max_context=4096,
                          max_decode_query_len=2)
    bufs = msa.allocate_buffers(caps, device, out_dtype=torch.float32)
    assert bufs.q.dtype == torch.bfloat16 and bufs.attn_out.dtype == torch.float32
    assert bufs.workspace.numel() == msa.workspace_bytes(caps, device, out_dtype=torch.float32)
    half = msa.allocate_buffers(caps, device, dtype=torch.float16)
    assert half.q.dtype == torch.float16 and half.attn_out.dtype == torch.float16
    with pytest.raises(ValueError, match="out_dtype"):
        msa.allocate_buffers(caps, device, dtype=torch.float32)
    with pytest.raises(ValueError, match="out_dtype"):
        msa.workspace_bytes(caps, device, dtype=torch.float16, out_dtype=torch.bfloat16)


def test_topk_reuse_rule() -> None:
    """freq 4, offset 0 over 57 sparse layers: 15 recompute, 42 reuse (A9)."""
    computes = [ref.recomputes_topk(o, 4, 0) for o in range(57)]
    assert sum(computes) == 15 and computes[0] and not computes[1] and computes[4]
