"""What ``msa.vllm_plugin.register`` points vLLM's MiniMax-M3 architectures to: vLLM's own
model classes, imported only when vLLM builds such a model, with vLLM's kernel selectors
wrapped first (``msa.vllm_plugin.impl.install``) so that each sparse layer built afterwards
picks msa where it applies."""

from msa.vllm_plugin.impl import install
from vllm.models.minimax_m3 import (
    MiniMaxM3MTP,
    MiniMaxM3SparseForCausalLM,
    MiniMaxM3SparseForConditionalGeneration,
)

install()

__all__ = ["MiniMaxM3MTP", "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"]
