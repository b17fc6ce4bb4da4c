// Continuous batching: every step takes the running decodes first (each with 1 + spec_tokens
// rows), then chunked prefills under the token budget. When the paged caches run out, the
// lowest-priority requests (latest arrival) are preempted: their pages are freed and they are
// recomputed later from their prompt and the tokens they already produced.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_allocator.h"
#include "engine/workload.h"
#include "msa/types.h"

namespace msa {
namespace engine {

enum class Phase {
  kQueued,   // not arrived yet
  kWaiting,  // arrived (or preempted), holds no pages
  kPrefill,  // computing its prompt (or recomputing prompt + output) in chunks
  kDecode,   // one pending token plus draft tokens per step
  kFinished,
};

struct RequestState {
  RequestSpec spec;
  Phase phase = Phase::kQueued;
  int64_t computed = 0;   // tokens whose K/V are in the caches
  int64_t generated = 0;  // output tokens produced so far
  int64_t committed = 0;  // positions whose attention outputs are recorded
  int preemptions = 0;
  int64_t recomputed_tokens = 0;
  double first_token_s = -1.0;
  double finish_s = -1.0;

  // Tokens to prefill: the prompt; after a preemption the prompt and every output token but the
  // last, which stays pending as it was, so the request resumes exactly where it stopped.
  int64_t prefill_target() const {
    return generated == 0 ? spec.prompt_tokens : spec.prompt_tokens + generated - 1;
  }
};

struct ScheduledRequest {
  int request = 0;    // index into Scheduler::requests()
  int64_t start = 0;  // position of the first row
  int64_t num_rows = 0;
};

struct StepPlan {
  int decode_query_len = 1;
  std::vector<ScheduledRequest> decodes;   // num_rows == decode_query_len each
  std::vector<ScheduledRequest> prefills;  // chunks
  int64_t num_tokens() const;
  bool empty() const { return decodes.empty() && prefills.empty(); }
};

// Rows of a step whose outputs are recorded: positions [first, end) of a request, which sit at
// rows [row, row + end - first) of the step's batch.
struct Commit {
  int request = 0;
  int64_t first = 0;
  int64_t end = 0;
  int64_t row = 0;
};

struct SchedulerOptions {
  int max_batch_tokens = 2048;
  int spec_tokens = 0;       // draft tokens per decode row group (0..7)
  double spec_accept = 0.7;  // probability that each successive draft is accepted
  int num_blocks = 1024;
  int block_size = 128;
  uint64_t seed = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& opts, std::vector<RequestSpec> requests);

  // The options are in range and every request fits the pool and the budget on its own, so the
  // run always progresses. Needs no Scheduler (whose pools are num_blocks entries each): the
  // engine checks before it allocates anything.
  static Status check(const SchedulerOptions& opts, const std::vector<RequestSpec>& requests);
  Status validate() const;

  void admit_arrivals(double now_s);
  // Arrival time of the next request not yet arrived (infinity when none).
  double next_arrival_s() const;
  bool done() const { return finished_ == static_cast<int>(requests_.size()); }

  StepPlan schedule();
  // Applies a finished step: advances sequences (drawing draft acceptance), finishes requests,
  // and lists the rows whose outputs are recorded for the first time.
  void complete(const StepPlan& plan, double now_s, std::vector<Commit>* commits);

  const std::vector<RequestState>& requests() const { return requests_; }
  const PagedCacheManager& caches() const { return caches_; }
  int64_t preemptions() const { return preemptions_; }
  int64_t draft_tokens_proposed() const { return drafts_proposed_; }
  int64_t draft_tokens_accepted() const { return drafts_accepted_; }
  int decode_query_len() const { return opts_.spec_tokens + 1; }

 private:
  // Frees pages of lower-priority requests not in this step until `request` can hold `tokens`.
  bool make_room(int request, int64_t tokens, const std::vector<char>& scheduled);
  void preempt(int request);
  void finish(int request, double now_s);
  void insert_sorted(std::vector<int>* list, int request);
  void erase(std::vector<int>* list, int request);
  int accepted_drafts(const RequestState& r) const;

  SchedulerOptions opts_;
  std::vector<RequestState> requests_;  // in arrival order; the index is the priority
  PagedCacheManager caches_;
  std::vector<int> waiting_;  // sorted by index
  std::vector<int> running_;  // sorted by index
  int next_arrival_ = 0;
  int finished_ = 0;
  int64_t preemptions_ = 0;
  int64_t drafts_proposed_ = 0;
  int64_t drafts_accepted_ = 0;
};

}  // namespace engine
}  // namespace msa
