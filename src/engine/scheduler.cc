#include "engine/scheduler.h"

#include <algorithm>
#include <limits>
#include <string>

#include "engine/synth.h"

namespace msa {
namespace engine {

int64_t StepPlan::num_tokens() const {
  int64_t n = 0;
  for (const auto& d : decodes) n += d.num_rows;
  for (const auto& p : prefills) n += p.num_rows;
  return n;
}

Scheduler::Scheduler(const SchedulerOptions& opts, std::vector<RequestSpec> requests)
    : opts_(opts), caches_(opts.num_blocks, opts.block_size) {
  std::stable_sort(
      requests.begin(), requests.end(),
      [](const RequestSpec& a, const RequestSpec& b) { return a.arrival_s < b.arrival_s; });
  for (auto& spec : requests) {
    RequestState r;
    r.spec = spec;
    requests_.push_back(r);
  }
}

Status Scheduler::check(const SchedulerOptions& opts, const std::vector<RequestSpec>& requests) {
  const int query_len = opts.spec_tokens + 1;
  if (opts.spec_tokens < 0 || opts.spec_tokens > 7) {
    return Status(StatusCode::kInvalidArgument,
                  "--spec-tokens: " + std::to_string(opts.spec_tokens) + ", expected 0..7");
  }
  if (!(opts.spec_accept >= 0.0 && opts.spec_accept <= 1.0)) {
    return Status(StatusCode::kInvalidArgument, "--spec-accept: expected a value in [0, 1]");
  }
  if (opts.max_batch_tokens < query_len) {
    return Status(StatusCode::kInvalidArgument,
                  "--max-batch-tokens: " + std::to_string(opts.max_batch_tokens) +
                      " is smaller than one decode row group (1 + spec tokens = " +
                      std::to_string(query_len) + ")");
  }
  if (opts.block_size < 1 || opts.num_blocks < 1) {
    return Status(StatusCode::kInvalidArgument, "--kv-blocks: " + std::to_string(opts.num_blocks) +
                                                    " pages of " + std::to_string(opts.block_size) +
                                                    " tokens, expected positive values");
  }
  for (const auto& r : requests) {
    if (r.prompt_tokens < 1 || r.output_tokens < 1 || r.prompt_tokens > kMaxRequestTokens ||
        r.output_tokens > kMaxRequestTokens) {
      return Status(StatusCode::kInvalidArgument,
                    "request " + std::to_string(r.id) + ": " + std::to_string(r.prompt_tokens) +
                        " prompt and " + std::to_string(r.output_tokens) +
                        " output tokens, expected each in [1, 2^31 - 1]");
    }
    // Largest reservation: the last decode step, with the pending token and its drafts.
    const int64_t tokens = r.prompt_tokens + r.output_tokens + query_len;
    const int64_t pages = (tokens + opts.block_size - 1) / opts.block_size;
    if (pages > opts.num_blocks) {
      return Status(StatusCode::kInvalidArgument,
                    "--kv-blocks: " + std::to_string(opts.num_blocks) +
                        " pages cannot hold request " + std::to_string(r.id) + " (" +
                        std::to_string(tokens) + " tokens need " + std::to_string(pages) +
                        " pages of " + std::to_string(opts.block_size) + ")");
    }
  }
  return Status::Ok();
}

Status Scheduler::validate() const {
  std::vector<RequestSpec> specs;
  for (const auto& r : requests_) specs.push_back(r.spec);
  return check(opts_, specs);
}

void Scheduler::admit_arrivals(double now_s) {
  while (next_arrival_ < static_cast<int>(requests_.size()) &&
         requests_[static_cast<size_t>(next_arrival_)].spec.arrival_s <= now_s) {
    requests_[static_cast<size_t>(next_arrival_)].phase = Phase::kWaiting;
    insert_sorted(&waiting_, next_arrival_);
    ++next_arrival_;
  }
}

double Scheduler::next_arrival_s() const {
  if (next_arrival_ >= static_cast<int>(requests_.size())) {
    return std::numeric_limits<double>::infinity();
  }
  return requests_[static_cast<size_t>(next_arrival_)].spec.arrival_s;
}

void Scheduler::insert_sorted(std::vector<int>* list, int request) {
  list->insert(std::lower_bound(list->begin(), list->end(), request), request);
}

void Scheduler::erase(std::vector<int>* list, int request) {
  auto it = std::lower_bound(list->begin(), list->end(), request);
  if (it != list->end() && *it == request) list->erase(it);
}

bool Scheduler::make_room(int request, int64_t tokens, const std::vector<char>& scheduled) {
  const int64_t id = requests_[static_cast<size_t>(request)].spec.id;
  while (!caches_.reserve(id, tokens)) {
    int victim = -1;
    for (auto it = running_.rbegin(); it != running_.rend() && *it > request; ++it) {
      if (!scheduled[static_cast<size_t>(*it)]) {
        victim = *it;
        break;
      }
    }
    if (victim < 0) return false;
    preempt(victim);
  }
  return true;
}

void Scheduler::preempt(int request) {
  RequestState& r = requests_[static_cast<size_t>(request)];
  caches_.release(r.spec.id);
  r.recomputed_tokens += r.computed;
  r.computed = 0;
  r.phase = Phase::kWaiting;
  ++r.preemptions;
  ++preemptions_;
  erase(&running_, request);
  insert_sorted(&waiting_, request);
}

void Scheduler::finish(int request, double now_s) {
  RequestState& r = requests_[static_cast<size_t>(request)];
  caches_.release(r.spec.id);
  r.phase = Phase::kFinished;
  r.finish_s = now_s;
  erase(&running_, request);
  ++finished_;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  const int query_len = decode_query_len();
  plan.decode_query_len = query_len;
  int64_t budget = opts_.max_batch_tokens;
  std::vector<char> scheduled(requests_.size(), 0);

  // Decodes first, in priority order; one that cannot get pages even after preempting every
  // lower-priority request is preempted itself.
  const std::vector<int> running = running_;
  for (int i : running) {
    RequestState& r = requests_[static_cast<size_t>(i)];
    if (r.phase != Phase::kDecode) continue;
    if (budget < query_len) break;
    if (!make_room(i, r.computed + query_len, scheduled)) {
      preempt(i);
      continue;
    }
    scheduled[static_cast<size_t>(i)] = 1;
    plan.decodes.push_back({i, r.computed, query_len});
    budget -= query_len;
  }

  // Prefills already under way continue; a chunk shrinks to the pages it can get.
  for (int i : std::vector<int>(running_)) {
    RequestState& r = requests_[static_cast<size_t>(i)];
    if (r.phase != Phase::kPrefill || scheduled[static_cast<size_t>(i)]) continue;
    if (budget == 0) break;
    int64_t chunk = std::min(r.prefill_target() - r.computed, budget);
    if (!make_room(i, r.computed + chunk, scheduled)) {
      chunk = std::min(chunk, caches_.max_tokens_reachable(r.spec.id) - r.computed);
      if (chunk <= 0 || !caches_.reserve(r.spec.id, r.computed + chunk)) continue;
    }
    scheduled[static_cast<size_t>(i)] = 1;
    plan.prefills.push_back({i, r.computed, chunk});
    budget -= chunk;
  }

  // Waiting requests are admitted in arrival order while pages and budget last; the head of
  // the queue waits rather than preempting anything.
  while (budget > 0 && !waiting_.empty()) {
    const int i = waiting_.front();
    RequestState& r = requests_[static_cast<size_t>(i)];
    const int64_t chunk = std::min({r.prefill_target() - r.computed, budget,
                                    caches_.max_tokens_reachable(r.spec.id) - r.computed});
    if (chunk <= 0 || !caches_.reserve(r.spec.id, r.computed + chunk)) break;
    waiting_.erase(waiting_.begin());
    insert_sorted(&running_, i);
    r.phase = Phase::kPrefill;
    scheduled[static_cast<size_t>(i)] = 1;
    plan.prefills.push_back({i, r.computed, chunk});
    budget -= chunk;
  }
  return plan;
}

int Scheduler::accepted_drafts(const RequestState& r) const {
  int accepted = 0;
  for (int d = 0; d < opts_.spec_tokens; ++d) {
    const float u = synth::unit_uniform(
        synth::hash(opts_.seed, synth::kTagAccept, static_cast<uint64_t>(r.spec.id),
                    static_cast<uint64_t>(r.computed), static_cast<uint64_t>(d)));
    if (u >= opts_.spec_accept) break;
    ++accepted;
  }
  return accepted;
}

void Scheduler::complete(const StepPlan& plan, double now_s, std::vector<Commit>* commits) {
  commits->clear();
  int64_t row = 0;
  auto record = [&](int i, int64_t start) {
    RequestState& r = requests_[static_cast<size_t>(i)];
    if (r.computed > r.committed) {
      commits->push_back({i, r.committed, r.computed, row + (r.committed - start)});
      r.committed = r.computed;
    }
  };
  for (const auto& d : plan.decodes) {
    RequestState& r = requests_[static_cast<size_t>(d.request)];
    // The pending token's row always counts; each accepted draft adds one more, and the last
    // accepted row yields a bonus token, so 1 + accepted tokens enter the sequence.
    const int accepted = accepted_drafts(r);
    const int64_t advance = std::min<int64_t>(1 + accepted, r.spec.output_tokens - r.generated);
    drafts_proposed_ += opts_.spec_tokens;
    drafts_accepted_ += std::min<int64_t>(accepted, advance - 1);
    r.computed += advance;
    r.generated += advance;
    record(d.request, d.start);
    row += d.num_rows;
    if (r.generated >= r.spec.output_tokens) finish(d.request, now_s);
  }
  for (const auto& p : plan.prefills) {
    RequestState& r = requests_[static_cast<size_t>(p.request)];
    r.computed += p.num_rows;
    record(p.request, p.start);
    row += p.num_rows;
    if (r.computed < r.prefill_target()) continue;
    if (r.generated == 0) {
      r.generated = 1;  // the last prompt row yields the first output token
      r.first_token_s = now_s;
    }
    r.phase = Phase::kDecode;
    if (r.generated >= r.spec.output_tokens) finish(p.request, now_s);
  }
}

}  // namespace engine
}  // namespace msa
