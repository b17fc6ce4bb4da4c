#include "engine/block_allocator.h"

#include <algorithm>

namespace msa {
namespace engine {

BlockAllocator::BlockAllocator(int num_blocks, bool descending)
    : num_blocks_(num_blocks), in_use_(static_cast<size_t>(num_blocks), 0) {
  free_.reserve(static_cast<size_t>(num_blocks));
  // The stack pops from the back: push in reverse of the hand-out order.
  for (int i = 0; i < num_blocks; ++i) free_.push_back(descending ? i : num_blocks - 1 - i);
}

bool BlockAllocator::allocate(int n, std::vector<int32_t>* table) {
  if (n < 0 || n > num_free()) return false;
  for (int i = 0; i < n; ++i) {
    const int32_t page = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(page)] = 1;
    table->push_back(page);
  }
  peak_used_ = std::max(peak_used_, num_used());
  return true;
}

bool BlockAllocator::release(std::vector<int32_t>* table) {
  for (int32_t page : *table) {
    if (page < 0 || page >= num_blocks_ || !in_use_[static_cast<size_t>(page)]) return false;
  }
  // Freed in reverse so that a request's first page is the next one handed out again.
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    in_use_[static_cast<size_t>(*it)] = 0;
    free_.push_back(*it);
  }
  table->clear();
  return true;
}

PagedCacheManager::PagedCacheManager(int num_blocks, int block_size)
    : block_size_(block_size), kv_(num_blocks, false), index_(num_blocks, true) {}

bool PagedCacheManager::reserve(int64_t request, int64_t tokens) {
  Tables& t = tables_[request];
  const int need = blocks_for(tokens) - static_cast<int>(t.kv.size());
  if (need <= 0) return true;
  if (need > kv_.num_free() || need > index_.num_free()) {
    if (t.kv.empty()) tables_.erase(request);
    return false;
  }
  kv_.allocate(need, &t.kv);
  index_.allocate(need, &t.index);
  return true;
}

int64_t PagedCacheManager::max_tokens_reachable(int64_t request) const {
  auto it = tables_.find(request);
  const int64_t held = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.kv.size());
  return (held + std::min(kv_.num_free(), index_.num_free())) * block_size_;
}

void PagedCacheManager::release(int64_t request) {
  auto it = tables_.find(request);
  if (it == tables_.end()) return;
  kv_.release(&it->second.kv);
  index_.release(&it->second.index);
  tables_.erase(it);
}

const std::vector<int32_t>& PagedCacheManager::kv_table(int64_t request) const {
  auto it = tables_.find(request);
  return it == tables_.end() ? empty_ : it->second.kv;
}

const std::vector<int32_t>& PagedCacheManager::index_table(int64_t request) const {
  auto it = tables_.find(request);
  return it == tables_.end() ? empty_ : it->second.index;
}

}  // namespace engine
}  // namespace msa
