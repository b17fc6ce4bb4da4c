"""MiniMax-M3 block-sparse attention (MSA) for PyTorch.

Importing the package registers the ``torch.ops.msa`` operators (CPU and CUDA kernels from the
msa C++ library, plus fake implementations for torch.compile) and exposes keyword-only
wrappers. ``msa.reference`` holds a pure-torch reference of every op.
"""

import torch  # noqa: F401  (loads libtorch, which the extension links against)

from . import _C  # noqa: F401  (loads the extension: registers torch.ops.msa.*)
from . import _fake  # noqa: F401  (registers the fake implementations)
from ._ops import (
    PreAttentionMode,
    batch_metadata,
    dense_attention,
    fused_qknorm_rope,
    index_topk_decode,
    index_topk_prefill,
    make_rope_cache,
    padded_workspace_bytes,
    rope_cache,
    sparse_attention_decode,
    sparse_attention_prefill,
    sparse_page16,
)
from .buffers import Capacities, StepBuffers, allocate_buffers, allocate_caches, workspace_bytes

__version__ = _C.VERSION


def built_with_cuda() -> bool:
    """True when the linked msa library has its CUDA backend."""
    return bool(_C.BUILT_WITH_CUDA)


__all__ = [
    "Capacities",
    "PreAttentionMode",
    "StepBuffers",
    "allocate_buffers",
    "allocate_caches",
    "batch_metadata",
    "built_with_cuda",
    "dense_attention",
    "fused_qknorm_rope",
    "index_topk_decode",
    "index_topk_prefill",
    "make_rope_cache",
    "padded_workspace_bytes",
    "rope_cache",
    "sparse_attention_decode",
    "sparse_attention_prefill",
    "sparse_page16",
    "workspace_bytes",
]
