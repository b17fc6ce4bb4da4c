#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <vector>

namespace msa {
namespace engine {
namespace {

std::vector<RequestSpec> requests(std::vector<std::pair<int64_t, int64_t>> lens) {
  std::vector<RequestSpec> r;
  for (size_t i = 0; i < lens.size(); ++i) {
    r.push_back({static_cast<int64_t>(i), 0.0, lens[i].first, lens[i].second});
  }
  return r;
}

// Runs the scheduler alone to completion, checking the per-step invariants.
std::vector<StepPlan> drive(Scheduler* s, int budget) {
  std::vector<StepPlan> plans;
  std::vector<Commit> commits;
  s->admit_arrivals(0.0);
  for (int step = 0; !s->done(); ++step) {
    EXPECT_LT(step, 100000) << "no progress";
    if (step >= 100000) break;
    StepPlan p = s->schedule();
    EXPECT_FALSE(p.empty());
    EXPECT_LE(p.num_tokens(), budget);
    for (const auto& d : p.decodes) EXPECT_EQ(d.num_rows, p.decode_query_len);
    // Every row's page is reserved before the step runs.
    for (const auto* list : {&p.decodes, &p.prefills}) {
      for (const auto& sr : *list) {
        const auto& r = s->requests()[static_cast<size_t>(sr.request)];
        EXPECT_GE(
            static_cast<int64_t>(s->caches().kv_table(r.spec.id).size()) * s->caches().block_size(),
            sr.start + sr.num_rows);
      }
    }
    s->complete(p, static_cast<double>(step), &commits);
    plans.push_back(p);
  }
  return plans;
}

TEST(Scheduler, ChunkedPrefillRespectsTheBudgetAndDecodesGoFirst) {
  SchedulerOptions o;
  o.max_batch_tokens = 64;
  o.block_size = 16;
  o.num_blocks = 100;
  Scheduler s(o, requests({{150, 5}, {90, 8}, {10, 3}}));
  ASSERT_TRUE(s.validate().ok());
  const auto plans = drive(&s, 64);
  // The first request's 150-token prompt needs three chunks of at most 64.
  ASSERT_GE(plans.size(), 3u);
  EXPECT_EQ(plans[0].prefills.size(), 1u);
  EXPECT_EQ(plans[0].prefills[0].num_rows, 64);
  bool mixed = false;
  for (const auto& p : plans) {
    if (!p.decodes.empty() && !p.prefills.empty()) mixed = true;
  }
  EXPECT_TRUE(mixed) << "decodes and prefill chunks should share steps";
  for (const auto& r : s.requests()) {
    EXPECT_EQ(r.phase, Phase::kFinished);
    EXPECT_EQ(r.generated, r.spec.output_tokens);
    EXPECT_EQ(r.committed, r.spec.prompt_tokens + r.spec.output_tokens - 1);
  }
  EXPECT_EQ(s.caches().kv().num_used(), 0);
  EXPECT_EQ(s.caches().index().num_used(), 0);
}

TEST(Scheduler, SpeculativeRowsAdvanceByAcceptedDrafts) {
  SchedulerOptions o;
  o.max_batch_tokens = 256;
  o.block_size = 16;
  o.num_blocks = 100;
  o.spec_tokens = 3;
  o.spec_accept = 0.6;
  Scheduler s(o, requests({{30, 40}, {50, 33}}));
  ASSERT_TRUE(s.validate().ok());
  const auto plans = drive(&s, 256);
  int64_t decode_steps = 0;
  for (const auto& p : plans) {
    EXPECT_EQ(p.decode_query_len, 4);
    if (!p.decodes.empty()) ++decode_steps;
  }
  EXPECT_GT(s.draft_tokens_accepted(), 0);
  EXPECT_LT(s.draft_tokens_accepted(), s.draft_tokens_proposed());
  // Accepted drafts make decoding take fewer steps than output tokens.
  EXPECT_LT(decode_steps, 39);
  for (const auto& r : s.requests()) EXPECT_EQ(r.generated, r.spec.output_tokens);
  EXPECT_EQ(s.caches().kv().num_used(), 0);
}

TEST(Scheduler, TinyPoolPreemptsAndEveryRequestStillFinishes) {
  SchedulerOptions o;
  o.max_batch_tokens = 128;
  o.block_size = 16;
  o.num_blocks = 14;  // one 200-token request at a time, barely
  Scheduler s(o, requests({{120, 60}, {100, 50}, {80, 70}, {60, 40}}));
  ASSERT_TRUE(s.validate().ok());
  drive(&s, 128);
  EXPECT_GT(s.preemptions(), 0);
  for (const auto& r : s.requests()) {
    EXPECT_EQ(r.phase, Phase::kFinished);
    EXPECT_EQ(r.committed, r.spec.prompt_tokens + r.spec.output_tokens - 1);
  }
  EXPECT_EQ(s.caches().kv().num_used(), 0);
  EXPECT_EQ(s.caches().index().num_used(), 0);
}

TEST(Scheduler, RejectsRequestsThatCanNeverFit) {
  SchedulerOptions o;
  o.block_size = 16;
  o.num_blocks = 4;
  Scheduler s(o, requests({{100, 10}}));
  const Status st = s.validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--kv-blocks"), std::string::npos) << st.message();
}

TEST(Scheduler, ArrivalsAreAdmittedOnlyWhenDue) {
  SchedulerOptions o;
  o.block_size = 16;
  o.num_blocks = 100;
  std::vector<RequestSpec> r = {{0, 0.0, 20, 2}, {1, 5.0, 20, 2}};
  Scheduler s(o, r);
  s.admit_arrivals(0.0);
  StepPlan p = s.schedule();
  ASSERT_EQ(p.prefills.size(), 1u);
  EXPECT_EQ(s.next_arrival_s(), 5.0);
}

}  // namespace
}  // namespace engine
}  // namespace msa
