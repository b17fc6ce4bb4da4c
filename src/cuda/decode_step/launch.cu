// CUDA backend of the sparse decode step (msa/decode_step.h): the persistent kernel
// (step_kernel.cuh, docs/decode_step.md) where detail::decode_step_path takes it, else the index
// top-k op, then sparse attention.
#include <cstdlib>
#include <string>

#include "core/attention_problem.h"
#include "core/backends.h"
#include "core/decode_step_chain.h"
#include "core/index_topk_problem.h"
#include "core/launch_policy.h"
#include "core/validate.h"
#include "cuda/common.cuh"
#include "cuda/decode_step/step_kernel.cuh"

namespace msa {
namespace cuda {
namespace {

using IndexProblem = detail::IndexTopkProblem;
using AttnProblem = detail::AttentionProblem;

const detail::DecodeStepOps kOps = {&workspace_size, &workspace_size, &run, &run};

// The kernel choice MSA_CUDA_DECODE_STEP asks for, read at every call.
detail::DecodeStepChoice step_choice() {
  return detail::parse_decode_step_choice(std::getenv("MSA_CUDA_DECODE_STEP"));
}

using StepKernel = void (*)(DecodeStepParams);

// The kernel instance of an index head dim of 64 or 128.
StepKernel step_kernel(int64_t index_dim) {
  return index_dim == 64 ? decode_step_kernel<1> : decode_step_kernel<2>;
}

int64_t head_groups(const AttnProblem& ap) {
  return ap.num_kv_heads() * ((ap.group() + kAttnHeads - 1) / kAttnHeads);
}

// Why the persistent kernel does not serve a call, empty when it does: its index phase is the
// balanced bf16 scorer with one query n-tile, its attention phase the one-block kernel's steps
// over bf16 K/V.
std::string persistent_gap(const IndexProblem& ip, const AttnProblem& ap) {
  const Status index = index_supported(ip);
  if (!index.ok()) return index.message();
  const Status attention = attention_supported(ap);
  if (!attention.ok()) return attention.message();
  if (ip.index_q.dtype != DType::kBF16 || ip.index_cache.dtype != DType::kBF16) {
    return "index.index_q and index.index_cache: bf16 only";
  }
  if (ip.head_dim() != 64 && ip.head_dim() != 128) return "index.index_q: head dim 64 or 128 only";
  if (ip.query_len * ip.num_heads() > 8) {
    return "index: query_len x index heads above 8 (one query n-tile)";
  }
  if (ip.num_requests() > detail::kIndexBalancedMaxRequests ||
      ip.num_requests() * (ip.max_blocks() + detail::kIndexBalancedMaxLeadUnits) > INT32_MAX) {
    return "index: more requests or blocks than the balanced score grid maps";
  }
  if (ap.kv.k.dtype != DType::kBF16) return "attention.kv_cache: bf16 only";
  if (!attention_block_kernel_fits(ap)) {
    return "attention: head dim 128, 128-key blocks and Q rows in 16-byte runs only";
  }
  return "";
}

// Resident CTAs of the kernel per SM (0 when the device cannot run it), per device and instance.
int step_ctas_per_sm(int64_t index_dim) {
  static PerDeviceCache<int, 2> cache;
  return cache.get(index_dim == 64 ? 0 : 1, [&] {
    const StepKernel kernel = step_kernel(index_dim);
    int n = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kBlockSmemBytes) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kStepThreads, kBlockSmemBytes) !=
            cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    return n;
  });
}

// Workspace of the persistent kernel: the block maxima [H_idx, T, max_blocks] (as the index op's),
// the partials [W, T, Hq, D] and their log2-sum-exps [W, T, Hq], the tickets [T, head groups].
struct StepWorkspace {
  size_t scores = 0, part_out = 0, part_lse = 0, tickets = 0;
  size_t total() const { return scores + part_out + part_lse + tickets; }
};
StepWorkspace step_workspace(const IndexProblem& ip, const AttnProblem& ap) {
  const auto T = static_cast<size_t>(ip.num_rows());
  const auto W = static_cast<size_t>(ap.topk_width());
  const auto hq = static_cast<size_t>(ap.num_q_heads());
  StepWorkspace w;
  w.scores =
      detail::align_up(static_cast<size_t>(ip.num_heads() * ip.max_blocks()) * T * sizeof(float));
  w.part_out = detail::align_up(W * T * hq * static_cast<size_t>(ap.head_dim()) * sizeof(float));
  w.part_lse = detail::align_up(W * T * hq * sizeof(float));
  w.tickets = detail::align_up(T * static_cast<size_t>(head_groups(ap)) * sizeof(uint32_t));
  return w;
}

Status run_persistent(const IndexProblem& ip, const AttnProblem& ap, int ctas_per_sm, int sms,
                      Workspace workspace, cudaStream_t stream) {
  const StepWorkspace w = step_workspace(ip, ap);
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, w.total()));
  const int64_t T = ip.num_rows();
  if (T == 0) return Status::Ok();
  char* base = static_cast<char*>(workspace.data);
  auto* scores = reinterpret_cast<float*>(base);
  const RowMap rows =
      make_row_map(ip.seq_lens, ip.cu_seqlens_q, ip.query_len, T, ip.max_blocks(), ip.block_size());
  DecodeStepParams p;
  p.score = make_score_params(ip, rows, scores);
  p.score.balanced_lead = balanced_lead(ip);
  p.select = make_select_params(ip, rows, scores);
  p.attn = make_attn_params(ap);
  p.attn.splits = static_cast<int32_t>(ap.topk_width());
  p.attn.subtiles_per_split = static_cast<int32_t>(ap.block_size() / 16);
  p.attn.part_out = reinterpret_cast<float*>(base + w.scores);
  p.attn.part_lse = reinterpret_cast<float*>(base + w.scores + w.part_out);
  p.merge = make_merge_params(p.attn, ap.head_dim());
  p.tickets = reinterpret_cast<uint32_t*>(base + w.scores + w.part_out + w.part_lse);
  p.head_groups = static_cast<int32_t>(head_groups(ap));

  // Every CTA resident at once (the grid barriers need it): the occupancy the kernel was planned
  // with; a launch the device cannot hold is refused by the runtime, not run.
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1, static_cast<unsigned>(int64_t{ctas_per_sm} * sms));
  config.blockDim = dim3(kStepThreads);
  config.dynamicSmemBytes = kBlockSmemBytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return launch_kernel_ex("decode_step_kernel", step_kernel(ip.head_dim()), config, p);
}

}  // namespace

Status workspace_size(const SparseDecodeStepArgs& args, size_t* bytes) {
  MSA_RETURN_IF_ERROR(detail::chain_workspace_size(kOps, args, bytes));
  const size_t persistent = step_workspace(detail::index_topk_problem(args.index),
                                           detail::attention_problem(args.attention))
                                .total();
  *bytes = std::max(*bytes, persistent);
  return Status::Ok();
}

Status run(const SparseDecodeStepArgs& args, Workspace workspace, Stream stream) {
  const IndexProblem ip = detail::index_topk_problem(args.index);
  const AttnProblem ap = detail::attention_problem(args.attention);
  const std::string gap = persistent_gap(ip, ap);
  const int ctas_per_sm = gap.empty() ? step_ctas_per_sm(ip.head_dim()) : 0;
  const int sms = device_sm_count();
  switch (detail::decode_step_path(step_choice(), gap.empty() && ctas_per_sm > 0,
                                   ap.batch_invariant, ip.num_rows(), head_groups(ap),
                                   ap.topk_width(), sms)) {
    case detail::DecodeStepPath::kChain:
      return detail::run_chain(kOps, args, workspace, stream);
    case detail::DecodeStepPath::kNotSupported:
      return detail::not_supported(
          "decode step: MSA_CUDA_DECODE_STEP=persistent, but the persistent kernel does not "
          "serve this call: " +
          (!gap.empty()       ? gap
           : ctas_per_sm == 0 ? std::string("the device cannot hold one CTA of it per SM")
           : ap.batch_invariant
               ? std::string("batch-invariant calls keep the attention op's splits")
               : std::string("more rows x head groups x top-k width than one CTA "
                             "per selected block (2 per SM)")));
    case detail::DecodeStepPath::kPersistent:
      break;
  }
  return run_persistent(ip, ap, ctas_per_sm, sms, workspace, stream_of(stream));
}

}  // namespace cuda
}  // namespace msa
