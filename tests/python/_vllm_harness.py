"""vLLM's real MiniMax-M3 sparse layer and metadata builders on the CPU, for
test_vllm_plugin.py and the recording step of vllm_gpu_driver.py (imported after vLLM is
known to import)."""

from __future__ import annotations

import dataclasses
import math
import tempfile

import torch

from _msa_testlib import generator, randn
from vllm.config import (
    AttentionConfig, CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig,
    SpeculativeConfig, VllmConfig, set_current_vllm_config)
from vllm.forward_context import set_forward_context
from vllm.transformers_utils.configs.minimax_m3 import MiniMaxM3Config, MiniMaxM3TextConfig
from vllm.v1.attention.backend import CommonAttentionMetadata

BLOCK, HQ, HKV, D, TOPK = 128, 16, 1, 128, 16  # one MiniMax-M3 rank at TP4
MAX_TOKENS, MAX_SEQS, MAX_LEN, NUM_PAGES = 512, 8, 4096, 96

STEPS = {
    # name: (query_lens, seq_lens, speculative tokens), decode requests first.
    "decode": ([1, 1, 1], [2300, 129, 1800], 0),
    "chunked_prefill": ([200], [1900], 0),
    "mixed": ([1, 1, 300], [2400, 3000, 2600], 0),
    "speculative": ([3, 3, 3, 150], [2100, 700, 2980, 150], 2),
}


def vllm_config(cache_dtype: str, indexer_kv_dtype: str, spec_tokens: int) -> VllmConfig:
    sparse = {
        "use_sparse_attention": True, "sparse_index_dim": D, "sparse_num_index_heads": HKV,
        "sparse_topk_blocks": TOPK, "sparse_block_size": BLOCK, "sparse_score_type": "max",
        "sparse_init_block": 0, "sparse_local_block": 1,
        "sparse_disable_index_value": [1] * 4, "sparse_attention_freq": [1] * 4,
    }
    text = MiniMaxM3TextConfig(
        vocab_size=256, hidden_size=256, num_hidden_layers=4, num_attention_heads=HQ,
        num_key_value_heads=HKV, head_dim=D, max_position_embeddings=MAX_LEN,
        num_local_experts=4, sparse_attention_config=sparse)
    directory = tempfile.mkdtemp(prefix="msa-vllm-")
    MiniMaxM3Config(text_config=text.to_dict(),
                    architectures=["MiniMaxM3SparseForConditionalGeneration"]
                    ).save_pretrained(directory)
    model = ModelConfig(model=directory, skip_tokenizer_init=True, dtype="bfloat16",
                        max_model_len=MAX_LEN)
    speculative = None
    if spec_tokens:
        speculative = SpeculativeConfig(method="ngram", num_speculative_tokens=spec_tokens,
                                        prompt_lookup_max=3, prompt_lookup_min=1,
                                        target_model_config=model,
                                        target_parallel_config=ParallelConfig())
    return VllmConfig(
        model_config=model,
        cache_config=CacheConfig(block_size=BLOCK, cache_dtype=cache_dtype),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=MAX_TOKENS,
                                         max_num_seqs=MAX_SEQS, max_model_len=MAX_LEN,
                                         is_encoder_decoder=False),
        attention_config=AttentionConfig(indexer_kv_dtype=indexer_kv_dtype),
        speculative_config=speculative,
        device_config=DeviceConfig("cpu"),
    )


_layer_count = 0


def build_layer(config: VllmConfig):
    """vLLM's MiniMaxM3SparseAttention layer (selectors run in its constructor)."""
    global _layer_count
    from vllm.models.minimax_m3.nvidia.model import MiniMaxM3SparseAttention

    _layer_count += 1
    text = config.model_config.hf_config.text_config
    topk_buffer = torch.full(((MAX_TOKENS + 3) // 4 * 4, HKV, TOPK), -1, dtype=torch.int32)
    return MiniMaxM3SparseAttention(text, 3, None, prefix=f"model.layers.{_layer_count}.attn",
                                    cache_config=config.cache_config,
                                    topk_indices_buffer=topk_buffer)


def common_metadata(query_lens: list[int], seq_lens: list[int],
                    block_table: torch.Tensor) -> CommonAttentionMetadata:
    """vLLM's per-step input of the metadata builders, decode requests first."""
    i32 = torch.int32
    starts = [0]
    for n in query_lens:
        starts.append(starts[-1] + n)
    slots = []
    for b, (n, s) in enumerate(zip(query_lens, seq_lens)):
        for p in range(s - n, s):
            slots.append(int(block_table[b, p // BLOCK]) * BLOCK + p % BLOCK)
    qsl = torch.tensor(starts, dtype=i32)
    lens = torch.tensor(seq_lens, dtype=i32)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=lens,
        num_reqs=len(query_lens), num_actual_tokens=starts[-1], max_query_len=max(query_lens),
        max_seq_len=max(seq_lens), block_table_tensor=block_table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64), seq_lens_cpu_upper_bound=lens)


def pages(seq_lens: list[int], gen: torch.Generator) -> torch.Tensor:
    """[B, max_blocks] int32 block table of distinct, shuffled pages."""
    per = [math.ceil(s / BLOCK) for s in seq_lens]
    perm = torch.randperm(NUM_PAGES, generator=gen).tolist()
    table = torch.zeros(len(seq_lens), max(per), dtype=torch.int32)
    used = 0
    for b, n in enumerate(per):
        table[b, :n] = torch.tensor(perm[used:used + n], dtype=torch.int32)
        used += n
    return table


def init_distributed() -> None:
    """vLLM's tensor-parallel group of one rank (gloo), which the layer's linears need."""
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with set_current_vllm_config(vllm_config("auto", "bf16", 0)):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"file://{tempfile.mktemp(prefix='msa-vllm-dist-')}")
        initialize_model_parallel(1, 1)


@dataclasses.dataclass
class Step:
    """One step through vLLM's layer: its inputs, vLLM's metadata and the results."""

    query_lens: list[int]
    seq_lens: list[int]
    fp8: bool
    kv: torch.Tensor  # [pages, Hkv, 128, 2 D] bf16 or e4m3
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    index_cache: torch.Tensor  # [pages, 128, Di]
    table: torch.Tensor
    index_table: torch.Tensor
    q: torch.Tensor  # [tokens, Hq * D]
    index_q: torch.Tensor  # [tokens, H_idx * Di]
    main_md: object
    index_md: object
    topk: torch.Tensor  # [H_idx, tokens, K], the layer's shared buffer after the step
    output: torch.Tensor  # [tokens, Hq * D]
    layer: object


def run_step(step: str, cache: str) -> Step:
    """Builds vLLM's layer for the step's configuration (its selectors choose the impls),
    binds random caches, builds the step's metadata with vLLM's builders and runs the layer's
    indexer + attention (vLLM's fused pre-attention op is CUDA-only; it is not msa's part)."""
    query_lens, seq_lens, spec = STEPS[step]
    fp8 = cache == "fp8"
    config = vllm_config("fp8" if fp8 else "auto", "fp8" if fp8 else "bf16", spec)
    gen = generator(len(step) + 10 * fp8)
    with set_current_vllm_config(config):
        layer = build_layer(config)
        index_cache_layer = layer.indexer.index_cache
        # Caches as vLLM binds them: the main cache packed [pages, Hkv, 128, 2 D] (uint8 bytes
        # of e4m3 when fp8), the index cache [pages, 128, Di].
        kv = randn(NUM_PAGES, HKV, BLOCK, 2 * D, gen=gen,
                   dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
        layer.kv_cache = kv.view(torch.uint8) if fp8 else kv
        index_cache = randn(NUM_PAGES, BLOCK, D, gen=gen, dtype=index_cache_layer.dtype)
        index_cache_layer.kv_cache = index_cache
        if fp8:
            layer._k_scale.fill_(0.5)
            layer._v_scale.fill_(0.25)
        table, index_table = pages(seq_lens, gen), pages(seq_lens, gen)
        device = torch.device("cpu")
        main_builder = layer.attn_backend.get_builder_cls()(
            layer.get_kv_cache_spec(config), [layer.layer_name], config, device)
        index_builder = index_cache_layer.get_attn_backend().get_builder_cls()(
            index_cache_layer.get_kv_cache_spec(config), [index_cache_layer.prefix], config,
            device)
        main_md = main_builder.build(0, common_metadata(query_lens, seq_lens, table))
        index_md = index_builder.build(0, common_metadata(query_lens, seq_lens, index_table))
        tokens = sum(query_lens)
        q = randn(tokens, HQ * D, gen=gen)
        index_q = randn(tokens, HKV * D, gen=gen, dtype=index_cache_layer.dtype)
        output = torch.zeros(tokens, HQ * D, dtype=torch.bfloat16)
        metadata = {layer.layer_name: main_md, index_cache_layer.prefix: index_md}
        with set_forward_context(metadata, config):
            layer._run_attention(q, None, index_q, output)
    return Step(query_lens, seq_lens, fp8, kv, layer._k_scale.clone(), layer._v_scale.clone(),
                index_cache, table, index_table, q, index_q, main_md, index_md,
                layer.topk_indices_buffer[:tokens].transpose(0, 1).clone(), output, layer)
