// CPU backend of the page-16 sparse block table (spec A10, B3.4). Each output row
// (query row t, KV head h) is written entirely by one thread, so the result does not depend on
// the thread count. Selected ids are visited in ascending order and a duplicated id counts once
// (the top-k row is treated as a set, as the attention ops do), so attending the first
// context_len tokens of the row's virtual sequence equals the sparse attention of the row.
#include <algorithm>
#include <limits>
#include <string>

#include "core/backends.h"
#include "core/thread_pool.h"
#include "core/validate.h"

namespace msa {
namespace cpu {
namespace {

int32_t at(const TensorView& t, int64_t i) { return t.ptr<int32_t>()[i * t.strides[0]]; }
int32_t at(const TensorView& t, int64_t i, int64_t j) {
  return t.ptr<int32_t>()[i * t.strides[0] + j * t.strides[1]];
}
int32_t at(const TensorView& t, int64_t i, int64_t j, int64_t k) {
  return t.ptr<int32_t>()[i * t.strides[0] + j * t.strides[1] + k * t.strides[2]];
}

// Smallest id above `after` in topk[h, t, :], or -1.
int64_t next_selected(const TensorView& topk, int64_t h, int64_t t, int64_t after) {
  int64_t best = -1;
  for (int64_t i = 0; i < topk.shape[2]; ++i) {
    const int64_t id = at(topk, h, t, i);
    if (id > after && (best < 0 || id < best)) best = id;
  }
  return best;
}

Status value_error(const SparsePage16Args& a, DeviceError bit, const std::string& msg) {
  if (a.error_flags.defined()) *a.error_flags.ptr<int32_t>() |= bit;
  return detail::out_of_range(msg);
}

// Validates every value the op reads before anything is written. Without the cache the op
// cannot bound pages from above; it rejects negative pages and pages whose page-16 ids would
// not fit in int32.
Status validate_values(const SparsePage16Args& a) {
  const int64_t bs = a.block_size, num_requests = a.block_table.shape[0];
  const int64_t num_kv_heads = a.topk.shape[0], max_blocks = a.block_table.shape[1];
  const int64_t max_page =
      (int64_t{std::numeric_limits<int32_t>::max()} + 1) / (a.page_stride * num_kv_heads) - 1;
  for (int64_t b = 0; b < num_requests; ++b) {
    const int64_t s = at(a.seq_lens, b);
    if (s < 0 || (s + bs - 1) / bs > max_blocks) {
      return value_error(a, kDeviceErrorSeqLen,
                         "seq_lens[" + std::to_string(b) + "] = " + std::to_string(s) +
                             ": expected 0..max_blocks * block_size (max_blocks " +
                             std::to_string(max_blocks) + ", block_size " + std::to_string(bs) +
                             ")");
    }
    if (s > 0 && s < a.query_len) {
      return value_error(a, kDeviceErrorQueryLen,
                         "seq_lens[" + std::to_string(b) + "] = " + std::to_string(s) +
                             ": below query_len " + std::to_string(a.query_len) +
                             " (0 marks a padded request)");
    }
    for (int64_t r = 0; r < a.query_len; ++r) {
      const int64_t t = b * a.query_len + r;
      const int64_t pos = s - a.query_len + r;
      if (pos < 0) continue;
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        for (int64_t i = 0; i < a.topk.shape[2]; ++i) {
          const int64_t id = at(a.topk, h, t, i);
          if (id < 0) continue;
          if (id > pos / bs) {
            return value_error(a, kDeviceErrorTopkId,
                               "topk[" + std::to_string(h) + ", " + std::to_string(t) + ", " +
                                   std::to_string(i) + "] = " + std::to_string(id) +
                                   ": beyond the visible blocks [0, " + std::to_string(pos / bs) +
                                   "] of row " + std::to_string(t) + " at position " +
                                   std::to_string(pos));
          }
          const int64_t page = at(a.block_table, b, id);
          if (page < 0 || page > max_page) {
            return value_error(a, kDeviceErrorBlockId,
                               "block_table[" + std::to_string(b) + ", " + std::to_string(id) +
                                   "] = " + std::to_string(page) + ": expected a page in [0, " +
                                   std::to_string(max_page) + "] (page-16 ids must fit in int32)");
          }
        }
      }
    }
  }
  return Status::Ok();
}

void build_row(const SparsePage16Args& a, int64_t row) {
  const int64_t num_kv_heads = a.topk.shape[0];
  const int64_t t = row / num_kv_heads, h = row % num_kv_heads;
  const int64_t b = t / a.query_len;
  const int64_t pos = at(a.seq_lens, b) - a.query_len + t % a.query_len;
  const int64_t bs = a.block_size, pages_per_block = bs / 16;
  const int64_t width = a.table_out.shape[1];
  int32_t* out = a.table_out.ptr<int32_t>() + row * a.table_out.strides[0];
  const int64_t col_stride = a.table_out.strides[1];

  int64_t col = 0, n_valid = 0, n_full = 0;
  bool own_selected = false;
  if (pos >= 0) {
    const int64_t own = pos / bs;
    for (int64_t id = next_selected(a.topk, h, t, -1); id >= 0;
         id = next_selected(a.topk, h, t, id)) {
      const int64_t page = at(a.block_table, b, id);
      for (int64_t j = 0; j < pages_per_block; ++j) {
        out[col++ * col_stride] =
            static_cast<int32_t>((page * a.page_stride + j) * num_kv_heads + h);
      }
      ++n_valid;
      if (id < own) {
        ++n_full;
      } else {
        own_selected = true;
      }
    }
  }
  for (; col < width; ++col) out[col * col_stride] = 0;

  int64_t context_len = 0;
  if (pos >= 0) {
    const int64_t own = pos / bs;
    context_len =
        own_selected ? n_full * bs + (pos + 1 - bs * own) : std::min(n_valid * bs, pos + 1);
  }
  a.context_lens_out.ptr<int32_t>()[row * a.context_lens_out.strides[0]] =
      static_cast<int32_t>(context_len);
}

}  // namespace

Status workspace_size(const SparsePage16Args& args, size_t* bytes) {
  (void)args;
  *bytes = 0;
  return Status::Ok();
}

Status run(const SparsePage16Args& args, Workspace workspace, Stream stream) {
  (void)workspace;
  MSA_RETURN_IF_ERROR(validate_values(args));
  const int64_t rows = args.table_out.shape[0];
  return detail::parallel_for(rows, stream, [&](int64_t begin, int64_t end, int) {
    for (int64_t row = begin; row < end; ++row) build_row(args, row);
  });
}

}  // namespace cpu
}  // namespace msa
