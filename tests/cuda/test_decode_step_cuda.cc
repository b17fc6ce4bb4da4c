// The persistent decode step kernel (MSA_CUDA_DECODE_STEP=persistent forces it): the same bits as
// the two ops it replaces wherever the attention op runs one CTA per selected block, bitwise
// repeatable, every output written (the outputs start poisoned), correct under CUDA-graph replay
// with other batch contents, and kNotSupported where it does not apply.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "ops/decode_step_cases.h"

namespace msa {
namespace test {
namespace {

using step::StepSpec;

// Sets MSA_CUDA_DECODE_STEP for the scope, restoring what was there.
class ScopedStepChoice {
 public:
  explicit ScopedStepChoice(const char* value) {
    const char* old = std::getenv("MSA_CUDA_DECODE_STEP");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("MSA_CUDA_DECODE_STEP", value, 1);
  }
  ~ScopedStepChoice() {
    if (had_) {
      setenv("MSA_CUDA_DECODE_STEP", old_.c_str(), 1);
    } else {
      unsetenv("MSA_CUDA_DECODE_STEP");
    }
  }
  ScopedStepChoice(const ScopedStepChoice&) = delete;
  ScopedStepChoice& operator=(const ScopedStepChoice&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

std::vector<StepSpec> small_specs() {
  std::vector<StepSpec> v;
  StepSpec s;
  v.push_back(s);  // batch 1 at 3000 tokens
  s.query_len = 4;
  s.seq_lens = {5000, 129, 0, 2049};
  s.seed = 2;
  v.push_back(s);
  s = StepSpec();
  s.num_q_heads = 32;
  s.num_kv_heads = 2;
  s.seq_lens = {1000, 0, 300};
  s.params.init_blocks = 1;
  s.params.local_blocks = 2;
  s.layout = attn::Layout::kSplitNhd;
  s.seed = 3;
  v.push_back(s);
  s = StepSpec();
  s.query_len = 2;
  s.seq_lens = {40000};
  s.seed = 4;
  v.push_back(s);  // a table of more than 256 columns
  s = StepSpec();
  s.seq_lens = {300, 1};
  s.index_dim = 64;
  s.seed = 5;
  v.push_back(s);
  return v;
}

void download_all(step::StepBatch& b) {
  for (TestTensor* t :
       {&b.topk, &b.chain_topk, &b.out, &b.chain_out, &b.lse, &b.chain_lse, &b.flags}) {
    t->download();
  }
}

void expect_step_equals_chain(step::StepBatch& b, const std::string& what) {
  download_all(b);
  EXPECT_TRUE(attn::same_bytes(b.topk, b.chain_topk)) << what << ": topk";
  EXPECT_TRUE(attn::same_bytes(b.out, b.chain_out)) << what << ": out";
  EXPECT_TRUE(attn::same_bytes(b.lse, b.chain_lse)) << what << ": lse";
  EXPECT_EQ(b.flags.get_flat(0), 0.0) << what << ": error flags";
}

TEST(DecodeStepPersistent, SameBitsAsTheTwoOpsAndRepeatable) {
  MSA_REQUIRE_TEST_DEVICE();
  int i = 0;
  for (const StepSpec& spec : small_specs()) {
    const std::string what = "spec " + std::to_string(i++);
    auto b = step::make_step_batch(spec, test_device());
    {
      const ScopedStepChoice choice("persistent");
      const Status st = attn::run_op(step::step_args(*b), b->device);
      ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
    }
    ASSERT_TRUE(step::run_chain(*b).ok());
    expect_step_equals_chain(*b, what);
    const std::vector<uint8_t> first = b->out.host_bytes();
    b->out.poison_device();
    b->topk.poison_device();
    {
      const ScopedStepChoice choice("persistent");
      ASSERT_TRUE(attn::run_op(step::step_args(*b), b->device).ok());
    }
    b->out.download();
    EXPECT_TRUE(b->out.host_bytes() == first) << what << ": a second run differs";
  }
}

TEST(DecodeStepPersistent, GraphReplayFollowsTheBatchContents) {
  MSA_REQUIRE_TEST_DEVICE();
  StepSpec spec;
  spec.query_len = 2;
  spec.seq_lens = {6000, 3000, 800};
  auto b = step::make_step_batch(spec, test_device());
  const ScopedStepChoice choice("persistent");
  const SparseDecodeStepArgs args = step::step_args(*b);
  size_t bytes = 0;
  ASSERT_TRUE(workspace_size(args, &bytes).ok());
  attn::DeviceBuffer ws(b->device, bytes);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status st = run(args, ws.workspace(), Stream{stream, 0});
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  // Shorter and padded requests, then the original lengths again.
  const std::vector<std::vector<int64_t>> variants = {
      {5000, 0, 800}, {129, 2, 700}, {6000, 3000, 800}};
  for (size_t v = 0; v < variants.size(); ++v) {
    for (int64_t r = 0; r < 3; ++r) b->seq_lens.set_flat(r, static_cast<double>(variants[v][r]));
    b->seq_lens.upload();
    for (TestTensor* t :
         {&b->topk, &b->out, &b->lse, &b->chain_topk, &b->chain_out, &b->chain_lse}) {
      t->poison_device();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    {
      const ScopedStepChoice chain("chain");
      ASSERT_TRUE(step::run_chain(*b).ok());
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_step_equals_chain(*b, "replay " + std::to_string(v));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(DecodeStepPersistent, BadBlockIdRaisesTheFlagLikeTheOps) {
  MSA_REQUIRE_TEST_DEVICE();
  StepSpec spec;
  spec.seq_lens = {2000, 900};
  auto b = step::make_step_batch(spec, test_device());
  b->attn_table.set({1, 3}, 1 << 30);  // a visible block of request 1 on a page past the cache
  b->attn_table.upload();
  {
    const ScopedStepChoice choice("persistent");
    ASSERT_TRUE(attn::run_op(step::step_args(*b), b->device).ok());
  }
  b->flags.download();
  const double step_flags = b->flags.get_flat(0);
  b->flags.set_flat(0, 0);
  b->flags.upload();
  ASSERT_TRUE(step::run_chain(*b).ok());
  download_all(*b);
  EXPECT_NE(step_flags, 0.0);
  EXPECT_EQ(step_flags, b->flags.get_flat(0));
  EXPECT_TRUE(attn::same_bytes(b->out, b->chain_out));
}

TEST(DecodeStepPersistent, ForcedWhereItDoesNotApplyIsNotSupported) {
  MSA_REQUIRE_TEST_DEVICE();
  StepSpec spec;
  spec.kv_dtype = DType::kE4M3;
  auto b = step::make_step_batch(spec, test_device());
  const ScopedStepChoice choice("persistent");
  const Status st = attn::run_op(step::step_args(*b), b->device);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_NE(st.message().find("attention.kv_cache"), std::string::npos) << st.to_string();
}

// Batch-invariant calls keep the attention op's fixed splits, whose bits the kernel's per-block
// splits would not give: forcing the kernel there is refused, not run.
TEST(DecodeStepPersistent, ForcedOnABatchInvariantCallIsNotSupported) {
  MSA_REQUIRE_TEST_DEVICE();
  StepSpec spec;
  spec.batch_invariant = true;
  auto b = step::make_step_batch(spec, test_device());
  const ScopedStepChoice choice("persistent");
  const Status st = attn::run_op(step::step_args(*b), b->device);
  EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
  EXPECT_NE(st.message().find("batch-invariant"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace test
}  // namespace msa
