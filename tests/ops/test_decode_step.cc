// The sparse decode step (msa/decode_step.h) on the binary's test device: the same top-k rows,
// outputs and LSEs, bit for bit, as its two ops run one after the other (which their own suites
// check against the float64 oracles), over ragged and padded batches, speculative rows, wide
// block tables, TP head presets, cache layouts and dtypes; and the checks that both halves
// describe one step.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "ops/decode_step_cases.h"

namespace msa {
namespace test {
namespace {

using step::StepSpec;

struct NamedStep {
  std::string name;
  StepSpec spec;
};

void PrintTo(const NamedStep& s, std::ostream* os) { *os << s.name; }

std::vector<NamedStep> step_specs() {
  std::vector<NamedStep> v;
  {
    StepSpec s;  // batch 1, TP4 heads
    v.push_back({"Batch1Tp4", s});
  }
  {
    StepSpec s;  // speculative rows, ragged lengths around block edges, a padded request
    s.query_len = 4;
    s.seq_lens = {5000, 129, 0, 2049};
    s.seed = 2;
    v.push_back({"Batch4Ql4Ragged", s});
  }
  {
    StepSpec s;  // TP2 heads (two KV heads, two index heads), init and local blocks forced
    s.num_q_heads = 32;
    s.num_kv_heads = 2;
    s.seq_lens = {1000, 0, 300};
    s.params.init_blocks = 1;
    s.params.local_blocks = 2;
    s.layout = attn::Layout::kSplitNhd;
    s.seed = 3;
    v.push_back({"Batch3Tp2Nhd", s});
  }
  {
    StepSpec s;  // a table of more than 256 columns (the wide selection path)
    s.query_len = 2;
    s.seq_lens = {40000};
    s.with_lse = false;
    s.seed = 4;
    v.push_back({"Ql2WideTable", s});
  }
  {
    StepSpec s;  // fewer visible blocks than the top-k width, head dim 64 index keys
    s.seq_lens = {300, 1};
    s.index_dim = 64;
    s.seed = 5;
    v.push_back({"ShortRowsIndexDim64", s});
  }
  {
    StepSpec s;  // e4m3 cache with a per-layer scale
    s.seq_lens = {2500, 700};
    s.kv_dtype = DType::kE4M3;
    s.seed = 6;
    v.push_back({"E4m3Cache", s});
  }
  {
    StepSpec s;  // batch invariant
    s.seq_lens = {2000, 6000};
    s.batch_invariant = true;
    s.seed = 7;
    v.push_back({"BatchInvariant", s});
  }
  {
    StepSpec s;  // 16 requests
    s.seq_lens.clear();
    for (int r = 0; r < 16; ++r) s.seq_lens.push_back(r == 5 ? 0 : 700 + 377 * r);
    s.seed = 8;
    v.push_back({"Batch16", s});
  }
  return v;
}

class DecodeStep : public ::testing::TestWithParam<NamedStep> {};

TEST_P(DecodeStep, SameBitsAsTheTwoOps) {
  MSA_REQUIRE_TEST_DEVICE();
  auto b = step::make_step_batch(GetParam().spec, test_device());
  const Status st = attn::run_op(step::step_args(*b), b->device);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const Status chain = step::run_chain(*b);
  ASSERT_TRUE(chain.ok()) << chain.to_string();
  for (TestTensor* t :
       {&b->topk, &b->chain_topk, &b->out, &b->chain_out, &b->lse, &b->chain_lse, &b->flags}) {
    t->download();
  }
  EXPECT_TRUE(attn::same_bytes(b->topk, b->chain_topk)) << "topk";
  EXPECT_TRUE(attn::same_bytes(b->out, b->chain_out)) << "out";
  if (b->spec.with_lse) {
    EXPECT_TRUE(attn::same_bytes(b->lse, b->chain_lse)) << "lse";
  }
  EXPECT_EQ(b->flags.get_flat(0), 0.0) << "error flags";
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeStep, ::testing::ValuesIn(step_specs()),
                         [](const ::testing::TestParamInfo<NamedStep>& p) { return p.param.name; });

// Each check names the argument that breaks the step's contract.
TEST(DecodeStepBadInput, HalvesMustDescribeOneStep) {
  MSA_REQUIRE_TEST_DEVICE();
  StepSpec spec;
  spec.seq_lens = {300, 200};
  auto b = step::make_step_batch(spec, test_device());
  const auto expect_invalid = [](const SparseDecodeStepArgs& a, const std::string& field) {
    const Status st = check(a);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.to_string();
    size_t bytes = 0;
    EXPECT_EQ(workspace_size(a, &bytes).code(), StatusCode::kInvalidArgument) << field;
    EXPECT_EQ(run(a, Workspace{}, Stream{}).code(), StatusCode::kInvalidArgument) << field;
  };
  ASSERT_TRUE(check(step::step_args(*b)).ok());
  {
    SparseDecodeStepArgs a = step::step_args(*b);
    a.attention.topk = b->chain_topk.view();
    expect_invalid(a, "attention.topk");
  }
  {
    SparseDecodeStepArgs a = step::step_args(*b);
    TestTensor other(DType::kI32, {2}, b->device);
    a.attention.seq_lens = other.view();
    expect_invalid(a, "attention.seq_lens");
  }
  {
    SparseDecodeStepArgs a = step::step_args(*b);
    a.attention.error_flags = TensorView{};
    expect_invalid(a, "attention.error_flags");
  }
  {
    SparseDecodeStepArgs a = step::step_args(*b);
    a.attention.error_flags.ndim = kMaxDims + 1;  // the attention half's own check names it
    expect_invalid(a, "error_flags");
  }
  {
    // error_flags given to neither half: the same (absent) view whatever its unused fields hold
    SparseDecodeStepArgs a = step::step_args(*b);
    a.index.error_flags = TensorView{};
    a.attention.error_flags = TensorView{};
    a.index.error_flags.ndim = kMaxDims + 1;
    a.attention.error_flags.ndim = kMaxDims + 1;
    EXPECT_TRUE(check(a).ok()) << check(a).to_string();
  }
  {
    SparseDecodeStepArgs a = step::step_args(*b);
    a.attention.batch_invariant = true;
    expect_invalid(a, "attention.batch_invariant");
  }
  {
    SparseDecodeStepArgs a = step::step_args(*b);
    a.index.topk_out.shape[1] = 1;  // the index half itself is invalid
    expect_invalid(a, "topk_out");
  }
}

// A bad value in either half is the step's error (docs/api.md, values inside tensors): on the CPU
// the step returns kOutOfRange and writes nothing but the error bit (not even the top-k of an
// index half that had nothing wrong); on CUDA the kernels skip the bad item and set the bit.
TEST(DecodeStepBadInput, BadValuesAreFlaggedWithoutPartialOutputs) {
  MSA_REQUIRE_TEST_DEVICE();
  StepSpec spec;
  spec.seq_lens = {300, 200};  // request 0 at position 299: blocks 0-2, its own block 2
  struct BadCase {
    const char* what;
    int32_t bit;
    void (*spoil)(step::StepBatch&);
  };
  const BadCase cases[] = {
      {"attention block_table", kDeviceErrorBlockId,
       [](step::StepBatch& b) {
         b.attn_table.set({0, 2}, 1 << 20);  // the own block, which every row selects
         b.attn_table.upload();
       }},
      {"index block_table", kDeviceErrorBlockId,
       [](step::StepBatch& b) {
         b.index_table.set({0, 0}, 1 << 20);  // a scored block
         b.index_table.upload();
       }},
      {"seq_lens", kDeviceErrorSeqLen,
       [](step::StepBatch& b) {
         b.seq_lens.set_flat(1, static_cast<double>(b.max_blocks * 128 + 1));
         b.seq_lens.upload();
       }},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    auto b = step::make_step_batch(spec, test_device());
    c.spoil(*b);
    const Status ran = attn::run_op(step::step_args(*b), b->device, Stream{nullptr, 2});
    for (TestTensor* t : {&b->topk, &b->out, &b->lse, &b->flags}) t->download();
    EXPECT_EQ(static_cast<int32_t>(b->flags.get_flat(0)), c.bit);
    if (b->device.is_cpu()) {
      EXPECT_EQ(ran.code(), StatusCode::kOutOfRange) << ran.to_string();
      for (const TestTensor* t : {&b->topk, &b->out, &b->lse}) {
        EXPECT_TRUE(std::all_of(t->host_bytes().begin(), t->host_bytes().end(), [](uint8_t v) {
          return v == 0xFF;
        })) << "an output was written";
      }
    } else {
      EXPECT_TRUE(ran.ok()) << ran.to_string();
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace msa
