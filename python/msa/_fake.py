"""Fake (meta) implementations of the msa operators for torch.compile and FakeTensor tracing.

Every op is an out variant that returns nothing and only writes into its annotated arguments,
so the fake implementation has nothing to compute.
"""

from __future__ import annotations

import torch

OP_NAMES = (
    "fused_qknorm_rope",
    "rope_cache",
    "index_topk_decode",
    "index_topk_prefill",
    "sparse_page16",
    "sparse_attention_decode",
    "sparse_attention_prefill",
    "dense_attention",
    "batch_metadata",
)


def _out_variant_fake(*args: object, **kwargs: object) -> None:
    return None


for _name in OP_NAMES:
    torch.library.register_fake(f"msa::{_name}", _out_variant_fake)
