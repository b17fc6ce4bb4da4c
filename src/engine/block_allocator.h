// Paged block allocation for the main KV cache and the index-key cache. Blocks are the cache
// pages of the library (block_size tokens each); a request owns a block table per cache.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace msa {
namespace engine {

// A fixed pool of num_blocks pages with a free list. Allocation is all-or-nothing: when fewer
// blocks are free than asked for, nothing changes and the caller decides (wait or preempt).
class BlockAllocator {
 public:
  // `descending` hands out high page ids first, so that two pools of the same size give a
  // request different tables (the index cache has its own block table, spec B4.3).
  BlockAllocator(int num_blocks, bool descending);

  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return num_blocks_ - num_free(); }
  int peak_used() const { return peak_used_; }

  // Appends n pages to *table; false (and nothing allocated) when fewer than n are free.
  bool allocate(int n, std::vector<int32_t>* table);
  // Returns every page of *table to the free list and clears it. False when a page is not
  // currently allocated (a double free), in which case nothing is returned.
  bool release(std::vector<int32_t>* table);

 private:
  int num_blocks_;
  int peak_used_ = 0;
  std::vector<int32_t> free_;    // a stack: the most recently freed page is reused first
  std::vector<uint8_t> in_use_;  // [num_blocks]
};

// The two caches' pools and every request's pair of block tables. A request always holds the
// same number of pages in both, sized for the tokens it may write.
class PagedCacheManager {
 public:
  PagedCacheManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  const BlockAllocator& kv() const { return kv_; }
  const BlockAllocator& index() const { return index_; }
  int blocks_for(int64_t tokens) const {
    return static_cast<int>((tokens + block_size_ - 1) / block_size_);
  }

  // Grows the request's tables to hold `tokens` tokens. False (nothing allocated) when the
  // pools cannot provide the extra pages.
  bool reserve(int64_t request, int64_t tokens);
  // Tokens the request could hold if it took every free page.
  int64_t max_tokens_reachable(int64_t request) const;
  // Frees both tables of the request (no-op for an unknown request).
  void release(int64_t request);
  int num_requests() const { return static_cast<int>(tables_.size()); }

  const std::vector<int32_t>& kv_table(int64_t request) const;
  const std::vector<int32_t>& index_table(int64_t request) const;

 private:
  struct Tables {
    std::vector<int32_t> kv;
    std::vector<int32_t> index;
  };
  int block_size_;
  BlockAllocator kv_;
  BlockAllocator index_;
  std::map<int64_t, Tables> tables_;
  std::vector<int32_t> empty_;
};

}  // namespace engine
}  // namespace msa
