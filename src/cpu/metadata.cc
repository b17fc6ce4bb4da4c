// CPU batch metadata builder (spec A8). A serial pre-pass validates every request and sizes
// the batch before anything is written; request offsets go to the workspace, and the per-token
// outputs are then filled in parallel (each token by one thread, so any thread count gives the
// same bytes).
//
// Validation beyond the header's contract: block-table entries can only be checked for
// negativity (the op does not know num_blocks), and totals that an int32 output cannot hold
// (token count, summed prefill seq_lens, total KV blocks) are capacity errors.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/backends.h"
#include "core/thread_pool.h"
#include "core/validate.h"
#include "msa/metadata.h"

namespace msa {
namespace cpu {
namespace {

int32_t load_i32(const TensorView& t, int64_t i) {
  return t.ptr<const int32_t>()[i * t.strides[0]];
}

int32_t load_i32(const TensorView& t, int64_t row, int64_t col) {
  return t.ptr<const int32_t>()[row * t.strides[0] + col * t.strides[1]];
}

void store_i32(const TensorView& t, int64_t i, int64_t v) {
  if (t.defined()) t.ptr<int32_t>()[i * t.strides[0]] = static_cast<int32_t>(v);
}

void store_i64(const TensorView& t, int64_t i, int64_t v) {
  if (t.defined()) t.ptr<int64_t>()[i * t.strides[0]] = v;
}

int64_t capacity(const TensorView& t) { return t.defined() ? t.shape[0] : 0; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The out-of-range status for a bad device value, after ORing its bit into error_flags.
Status reject(const BatchMetadataArgs& args, DeviceError bit, const std::string& msg) {
  if (args.error_flags.defined()) *args.error_flags.ptr<int32_t>() |= bit;
  return detail::out_of_range(msg);
}

// Used entries of one request's row: present in the table and non-negative page ids.
Status check_table_row(const BatchMetadataArgs& args, const TensorView& table, const char* name,
                       int64_t b, int64_t seq_len, int64_t used) {
  const std::string row = std::string(name) + "[" + std::to_string(b);
  if (used > table.shape[1]) {
    return reject(args, kDeviceErrorSeqLen,
                  "seq_lens[" + std::to_string(b) + "] = " + std::to_string(seq_len) + " needs " +
                      std::to_string(used) + " blocks but " + name + " has " +
                      std::to_string(table.shape[1]) + " columns");
  }
  for (int64_t j = 0; j < used; ++j) {
    const int32_t page = load_i32(table, b, j);
    if (page < 0) {
      return reject(args, kDeviceErrorBlockId,
                    row + ", " + std::to_string(j) + "] = " + std::to_string(page) +
                        ": negative page id in a used entry (seq_len " + std::to_string(seq_len) +
                        ")");
    }
  }
  return Status::Ok();
}

struct BatchTotals {
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t prefill_seq_sum = 0;
  int64_t kv_blocks = 0;  // of prefill requests only (spec B6: it sizes prefill structures)
};

// Validates every request and fills starts[0..B] (row offset of each request, then the total).
Status validate_batch(const BatchMetadataArgs& args, int64_t* starts, BatchTotals* totals) {
  const int64_t batch = args.query_lens.shape[0];
  const int64_t nd = args.num_decode_requests;
  const int64_t L = args.decode_query_len;
  BatchTotals acc;
  int64_t row = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t q = load_i32(args.query_lens, b);
    const int64_t s = load_i32(args.seq_lens, b);
    const std::string ql = "query_lens[" + std::to_string(b) + "] = " + std::to_string(q);
    if (b < nd && !(q == L || (q == 0 && s == 0))) {
      return reject(args, kDeviceErrorQueryLen,
                    ql + ": decode request expects decode_query_len = " + std::to_string(L) +
                        " (or 0 with seq_len 0 for a padded request)");
    }
    if (b >= nd && q < 1) {
      return reject(args, kDeviceErrorQueryLen, ql + ": a prefill request needs at least 1");
    }
    if (s < q) {
      return reject(args, kDeviceErrorSeqLen,
                    "seq_lens[" + std::to_string(b) + "] = " + std::to_string(s) +
                        ": less than the query length " + std::to_string(q));
    }
    const int64_t used = ceil_div(s, args.block_size);
    if (args.block_table.defined()) {
      MSA_RETURN_IF_ERROR(check_table_row(args, args.block_table, "block_table", b, s, used));
    }
    if (args.index_block_table.defined()) {
      MSA_RETURN_IF_ERROR(
          check_table_row(args, args.index_block_table, "index_block_table", b, s, used));
    }
    starts[b] = row;
    if (b < nd) {
      row += L;
      acc.decode_tokens += L;
    } else {
      row += q;
      acc.prefill_tokens += q;
      acc.prefill_seq_sum += s;
      acc.kv_blocks += used;
    }
  }
  starts[batch] = row;

  const int64_t int32_max = std::numeric_limits<int32_t>::max();
  if (row > int32_max || acc.prefill_seq_sum > int32_max || acc.kv_blocks > int32_max) {
    return reject(
        args, kDeviceErrorCapacity,
        "batch: " + std::to_string(row) + " tokens, " + std::to_string(acc.prefill_seq_sum) +
            " prefill keys and " + std::to_string(acc.kv_blocks) +
            " prefill KV blocks; int32 outputs hold at most " + std::to_string(int32_max));
  }
  const std::pair<const TensorView*, const char*> token_outputs[] = {
      {&args.token_request, "token_request"},
      {&args.token_position, "token_position"},
      {&args.slot_mapping, "slot_mapping"},
      {&args.index_slot_mapping, "index_slot_mapping"}};
  for (const auto& [t, name] : token_outputs) {
    if (t->defined() && row > t->shape[0]) {
      return reject(args, kDeviceErrorCapacity,
                    std::string(name) + ": holds " + std::to_string(t->shape[0]) +
                        " tokens, the batch has " + std::to_string(row));
    }
  }
  *totals = acc;
  return Status::Ok();
}

int64_t slot_of(const TensorView& table, int64_t b, int64_t position, int64_t block_size) {
  if (position < 0) return -1;
  const int64_t page = load_i32(table, b, position / block_size);
  return page * block_size + position % block_size;
}

}  // namespace

Status workspace_size(const BatchMetadataArgs& args, size_t* bytes) {
  int64_t starts_bytes = 0;  // int64 row offsets of B + 1 requests
  MSA_RETURN_IF_ERROR(detail::checked_mul(args.query_lens.shape[0] + 1, 8,
                                          "query_lens: workspace bytes for B + 1 offsets",
                                          &starts_bytes));
  *bytes = detail::align_up(static_cast<size_t>(starts_bytes));
  return Status::Ok();
}

Status run(const BatchMetadataArgs& args, Workspace workspace, Stream stream) {
  size_t needed = 0;
  MSA_RETURN_IF_ERROR(cpu::workspace_size(args, &needed));
  MSA_RETURN_IF_ERROR(detail::check_workspace(workspace, needed));
  int64_t* starts = static_cast<int64_t*>(workspace.data);
  BatchTotals sums;
  MSA_RETURN_IF_ERROR(validate_batch(args, starts, &sums));

  const int64_t batch = args.query_lens.shape[0];
  const int64_t nd = args.num_decode_requests;
  const int64_t L = args.decode_query_len;
  const int64_t bs = args.block_size;
  const int64_t num_tokens = starts[batch];

  const int64_t token_capacity =
      std::max({capacity(args.token_request), capacity(args.token_position),
                capacity(args.slot_mapping), capacity(args.index_slot_mapping)});
  // The per-token outputs first: when the worker threads cannot start, nothing is written.
  MSA_RETURN_IF_ERROR(
      detail::parallel_for(token_capacity, stream, [&](int64_t begin, int64_t end, int) {
        // The request of the first token, then advanced as tokens cross request boundaries.
        int64_t b = std::upper_bound(starts, starts + batch + 1, begin) - starts - 1;
        for (int64_t t = begin; t < end; ++t) {
          while (b < batch && t >= starts[b + 1]) ++b;
          int64_t request = -1, position = -1, slot = -1, index_slot = -1;
          if (t < num_tokens) {
            request = b;
            const int64_t q = b < nd ? L : load_i32(args.query_lens, b);
            position = load_i32(args.seq_lens, b) - q + (t - starts[b]);
            if (args.slot_mapping.defined()) slot = slot_of(args.block_table, b, position, bs);
            if (args.index_slot_mapping.defined()) {
              index_slot = slot_of(args.index_block_table, b, position, bs);
            }
          }
          if (t < capacity(args.token_request)) store_i32(args.token_request, t, request);
          if (t < capacity(args.token_position)) store_i32(args.token_position, t, position);
          if (t < capacity(args.slot_mapping)) store_i64(args.slot_mapping, t, slot);
          if (t < capacity(args.index_slot_mapping))
            store_i64(args.index_slot_mapping, t, index_slot);
        }
      }));

  for (int64_t b = 0; b <= batch; ++b) store_i32(args.query_start_loc, b, starts[b]);
  int64_t cu_k = 0;
  for (int64_t b = nd; b <= batch; ++b) {
    store_i32(args.prefill_cu_seqlens_q, b - nd, starts[b] - sums.decode_tokens);
    store_i32(args.prefill_cu_seqlens_k, b - nd, cu_k);
    if (b < batch) cu_k += load_i32(args.seq_lens, b);
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = load_i32(args.seq_lens, b);
    store_i32(args.context_lens, b, s - load_i32(args.query_lens, b));
    store_i32(args.kv_block_counts, b, ceil_div(s, bs));
  }
  store_i32(args.totals, 0, sums.decode_tokens);
  store_i32(args.totals, 1, sums.prefill_tokens);
  store_i32(args.totals, 2, num_tokens);
  store_i32(args.totals, 3, sums.kv_blocks);

  return Status::Ok();
}

}  // namespace cpu
}  // namespace msa
