"""One step of MiniMax-M3 sparse attention on msa, from vLLM's per-step metadata.

The impls of ``msa.vllm_plugin.impl`` look their metadata up in vLLM's forward context and call
these functions; they import nothing of vLLM (the metadata is read by attribute: vLLM's
MiniMaxM3SparseMetadata / MiniMaxM3IndexerMetadata, or objects with the same fields), so a
GPU machine without vLLM can drive them with recorded metadata
(tests/python/vllm_gpu_driver.py).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

import msa


def select_blocks(md: Any, *, index_query: torch.Tensor, index_cache: torch.Tensor,
                  topk_buffer: torch.Tensor, num_index_heads: int, index_head_dim: int,
                  topk: int, init_blocks: int, local_blocks: int, workspace: torch.Tensor
                  ) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Index top-k of the step's rows into vLLM's token-major [tokens, H_idx, K] buffer
    (decode rows first); returns the (decode, prefill) rows as [H_idx, rows, K] views."""
    nd, num_tokens = md.num_decode_tokens, md.num_actual_tokens
    iq = index_query[:num_tokens].view(-1, num_index_heads, index_head_dim)
    out = topk_buffer.transpose(0, 1)  # msa's [H_idx, tokens, K] without a copy
    # vLLM's init/local block counts, passed explicitly (msa's wrappers default to 0 / 1).
    selection = dict(topk=topk, init_blocks=init_blocks, local_blocks=local_blocks)
    decode_topk = prefill_topk = None
    if md.num_decodes > 0:
        d = md.decode
        msa.index_topk_decode(
            index_q=iq[:nd], index_cache=index_cache, block_table=d.block_table,
            seq_lens=d.seq_lens, topk_out=out, query_len=d.decode_query_len,
            workspace=workspace, **selection)
        decode_topk = out[:, :nd]
    if md.num_prefills > 0:
        p = md.prefill
        msa.index_topk_prefill(
            index_q=iq[nd:], index_cache=index_cache, block_table=p.block_table,
            cu_seqlens_q=p.cu_seqlens_q, seq_lens=p.seq_lens, topk_out=out[:, nd:],
            workspace=workspace, **selection)
        prefill_topk = out[:, nd:num_tokens]
    return decode_topk, prefill_topk


def attend(md: Any, *, query: torch.Tensor, output: torch.Tensor, kv_cache: torch.Tensor,
           topk_buffer: torch.Tensor, num_heads: int, head_size: int, scale: float,
           k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor],
           workspace: torch.Tensor) -> torch.Tensor:
    """Sparse attention of the step's rows over the blocks in ``topk_buffer``, into
    ``output``. ``kv_cache`` is the packed [pages, Hkv, 128, 2 D] cache in bf16 or e4m3
    (vLLM's uint8 fp8 cache viewed as e4m3), with per-layer scales for e4m3."""
    nd, num_tokens = md.num_decode_tokens, md.num_actual_tokens
    topk = topk_buffer[:num_tokens].transpose(0, 1)
    q = query[:num_tokens].view(-1, num_heads, head_size)
    out = output[:num_tokens].view(-1, num_heads, head_size)
    common = dict(kv_cache=kv_cache, softmax_scale=scale, k_scale=k_scale, v_scale=v_scale,
                  workspace=workspace)
    if md.num_decodes > 0:
        d = md.decode
        msa.sparse_attention_decode(
            q=q[:nd], block_table=d.block_table, seq_lens=d.seq_lens, topk=topk[:, :nd],
            out=out[:nd], query_len=d.decode_query_len, **common)
    if md.num_prefills > 0:
        p = md.prefill
        msa.sparse_attention_prefill(
            q=q[nd:], block_table=p.block_table, cu_seqlens_q=p.cu_seqlens_q,
            seq_lens=p.seq_lens, topk=topk[:, nd:], out=out[nd:], **common)
    return output
