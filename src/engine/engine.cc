#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <utility>

#include "engine/synth.h"

namespace msa {
namespace engine {

int default_pool_blocks(const std::vector<RequestSpec>& requests, int block_size, int spec_tokens) {
  int64_t blocks = 0;
  for (const auto& r : requests) {
    const int64_t tokens = r.prompt_tokens + r.output_tokens + spec_tokens + 1;
    blocks += (tokens + block_size - 1) / block_size;
  }
  return static_cast<int>(std::min<int64_t>(blocks, 1 << 30));
}

Status run_engine(const EngineOptions& opts, const std::vector<RequestSpec>& requests,
                  const std::function<void(const Progress&)>& progress, RunResult* out) {
  if (requests.empty()) return Status(StatusCode::kInvalidArgument, "no requests to run");
  // Everything is validated before anything is allocated: the scheduler's pools, the runner's
  // caches and activations, the per-position digests.
  Status s = Scheduler::check(opts.scheduler, requests);
  if (!s.ok()) return s;

  const int query_len = opts.scheduler.spec_tokens + 1;
  const int bs = opts.scheduler.block_size;
  int64_t longest = 0;
  for (const auto& r : requests) {
    longest = std::max(longest, r.prompt_tokens + r.output_tokens + query_len);
  }
  RunnerOptions ro = opts.runner;
  ro.num_blocks = opts.scheduler.num_blocks;
  ro.max_batch_tokens = opts.scheduler.max_batch_tokens;
  ro.max_requests = static_cast<int>(
      std::min<int64_t>(static_cast<int64_t>(requests.size()), opts.scheduler.max_batch_tokens));
  ro.max_blocks_per_request = static_cast<int>((longest + bs - 1) / bs);
  ro.max_position = longest + 1;
  if (ro.max_position > ro.model.max_position_embeddings) {
    return Status(StatusCode::kInvalidArgument,
                  "workload: a request reaches position " + std::to_string(longest) +
                      ", beyond max_position_embeddings = " +
                      std::to_string(ro.model.max_position_embeddings));
  }
  std::unique_ptr<ModelRunner> runner;
  s = ModelRunner::create(ro, &runner);
  if (!s.ok()) return s;
  Scheduler sched(opts.scheduler, requests);

  RunResult res;
  res.plan = runner->plan();
  res.pool_blocks = opts.scheduler.num_blocks;
  res.device_bytes = runner->device_bytes();
  // Per request, per position: the digest of the position's rows the first time they were
  // computed and kept (recomputation after preemption reproduces them and is not recorded).
  std::vector<std::vector<uint64_t>> position_digests(sched.requests().size());
  for (size_t i = 0; i < sched.requests().size(); ++i) {
    const auto& spec = sched.requests()[i].spec;
    position_digests[i].assign(static_cast<size_t>(spec.prompt_tokens + spec.output_tokens), 0);
  }

  const auto t0 = std::chrono::steady_clock::now();
  double idle = 0.0;
  auto now_s = [&]() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() + idle;
  };
  std::vector<Commit> commits;
  StepOutput step_out;
  int64_t step = 0;
  int64_t generated = 0;
  while (!sched.done()) {
    double now = now_s();
    sched.admit_arrivals(now);
    StepPlan plan = sched.schedule();
    if (plan.empty()) {
      const double next = sched.next_arrival_s();
      if (next == std::numeric_limits<double>::infinity()) {
        return Status(StatusCode::kInternal, "scheduler: no runnable request and none to come");
      }
      // Nothing to do until the next arrival: skip the gap instead of sleeping.
      idle += std::max(0.0, next - now);
      continue;
    }
    Batch batch;
    batch.step = step;
    batch.num_decodes = static_cast<int>(plan.decodes.size());
    batch.decode_query_len = plan.decode_query_len;
    StepRecord rec;
    rec.step = step;
    rec.start_s = now;
    auto add = [&](const ScheduledRequest& sr, bool decode) {
      const RequestState& r = sched.requests()[static_cast<size_t>(sr.request)];
      BatchRequest br;
      br.id = r.spec.id;
      br.start = sr.start;
      br.num_rows = sr.num_rows;
      br.kv_table = &sched.caches().kv_table(r.spec.id);
      br.index_table = &sched.caches().index_table(r.spec.id);
      batch.requests.push_back(br);
      rec.max_context = std::max(rec.max_context, sr.start + sr.num_rows);
      (decode ? rec.decode_tokens : rec.prefill_tokens) += sr.num_rows;
    };
    for (const auto& d : plan.decodes) add(d, true);
    for (const auto& p : plan.prefills) add(p, false);
    rec.decode_requests = static_cast<int>(plan.decodes.size());
    rec.prefill_requests = static_cast<int>(plan.prefills.size());
    rec.tokens = rec.decode_tokens + rec.prefill_tokens;
    rec.kv_blocks_used = sched.caches().kv().num_used();

    const auto s0 = std::chrono::steady_clock::now();
    s = runner->execute(batch, &step_out);
    if (!s.ok()) return Status(s.code(), "step " + std::to_string(step) + ": " + s.message());
    rec.latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
    rec.stages = step_out.stages;
    res.busy_s += rec.latency_ms / 1e3;
    res.processed_tokens += rec.tokens;
    res.invariant_op_calls += step_out.invariant_op_calls;
    res.variant_op_calls += step_out.variant_op_calls;
    res.topk_union.add(step_out.topk_union);
    for (auto& fs : step_out.samples) res.samples.push_back(fs);

    const int64_t before = [&]() {
      int64_t g = 0;
      for (const auto& r : sched.requests()) g += r.generated;
      return g;
    }();
    sched.complete(plan, now_s(), &commits);
    for (const Commit& c : commits) {
      auto& digests = position_digests[static_cast<size_t>(c.request)];
      for (int64_t p = c.first; p < c.end; ++p) {
        digests[static_cast<size_t>(p)] =
            step_out.digests[static_cast<size_t>(c.row + p - c.first)];
      }
    }
    int64_t after = 0;
    for (const auto& r : sched.requests()) after += r.generated;
    rec.output_tokens = after - before;
    generated += rec.output_tokens;
    res.steps.push_back(rec);
    ++step;
    if (progress) {
      Progress pr;
      pr.total = static_cast<int>(sched.requests().size());
      for (const auto& r : sched.requests()) {
        const bool finished = r.phase == Phase::kFinished;
        pr.finished += finished;
        pr.prompt_tokens +=
            finished ? r.spec.prompt_tokens : std::min(r.computed, r.spec.prompt_tokens);
        pr.prompt_total += r.spec.prompt_tokens;
        pr.output_total += r.spec.output_tokens;
      }
      pr.step = step;
      pr.elapsed_s = now_s();
      pr.output_tokens = generated;
      progress(pr);
    }
  }
  res.wall_s = now_s();
  res.idle_skipped_s = idle;
  res.preemptions = sched.preemptions();
  res.draft_proposed = sched.draft_tokens_proposed();
  res.draft_accepted = sched.draft_tokens_accepted();
  res.peak_kv_blocks = sched.caches().kv().peak_used();
  res.peak_index_blocks = sched.caches().index().peak_used();
  res.blocks_in_use_at_end = sched.caches().kv().num_used() + sched.caches().index().num_used();

  for (size_t i = 0; i < sched.requests().size(); ++i) {
    const RequestState& r = sched.requests()[i];
    RequestResult rr;
    rr.id = r.spec.id;
    rr.arrival_s = r.spec.arrival_s;
    rr.prompt_tokens = r.spec.prompt_tokens;
    rr.output_tokens = r.spec.output_tokens;
    rr.preemptions = r.preemptions;
    rr.recomputed_tokens = r.recomputed_tokens;
    rr.ttft_s = r.first_token_s - r.spec.arrival_s;
    rr.latency_s = r.finish_s - r.spec.arrival_s;
    uint64_t h = synth::mix64(static_cast<uint64_t>(r.spec.id));
    // Positions that hold a kept token: the prompt and every output token but the last, which
    // is never fed back.
    const int64_t kept = r.spec.prompt_tokens + r.spec.output_tokens - 1;
    for (int64_t p = 0; p < kept; ++p) {
      h = synth::mix64(h ^ position_digests[i][static_cast<size_t>(p)]);
    }
    rr.checksum = h;
    res.prompt_tokens += rr.prompt_tokens;
    res.output_tokens += rr.output_tokens;
    res.recomputed_tokens += rr.recomputed_tokens;
    res.requests.push_back(rr);
  }
  std::sort(res.requests.begin(), res.requests.end(),
            [](const RequestResult& a, const RequestResult& b) { return a.id < b.id; });
  *out = std::move(res);
  return Status::Ok();
}

}  // namespace engine
}  // namespace msa
