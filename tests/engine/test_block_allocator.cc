#include "engine/block_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace msa {
namespace engine {
namespace {

TEST(BlockAllocator, AllocatesAllOrNothingAndTracksPeak) {
  BlockAllocator a(8, false);
  std::vector<int32_t> t1, t2;
  ASSERT_TRUE(a.allocate(5, &t1));
  EXPECT_EQ(t1, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(a.allocate(4, &t2));  // only 3 free: nothing handed out
  EXPECT_TRUE(t2.empty());
  EXPECT_EQ(a.num_free(), 3);
  ASSERT_TRUE(a.allocate(3, &t2));
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(a.peak_used(), 8);
  ASSERT_TRUE(a.release(&t1));
  EXPECT_TRUE(t1.empty());
  EXPECT_EQ(a.num_free(), 5);
  EXPECT_EQ(a.peak_used(), 8);
}

TEST(BlockAllocator, RejectsDoubleFree) {
  BlockAllocator a(4, false);
  std::vector<int32_t> t;
  ASSERT_TRUE(a.allocate(2, &t));
  std::vector<int32_t> copy = t;
  ASSERT_TRUE(a.release(&t));
  EXPECT_FALSE(a.release(&copy));
  EXPECT_EQ(a.num_free(), 4);
}

TEST(BlockAllocator, DescendingPoolHandsOutHighIdsFirst) {
  BlockAllocator a(6, true);
  std::vector<int32_t> t;
  ASSERT_TRUE(a.allocate(2, &t));
  EXPECT_EQ(t, (std::vector<int32_t>{5, 4}));
}

TEST(PagedCacheManager, ReservesBothTablesAndReleasesEverything) {
  PagedCacheManager m(10, 16);
  ASSERT_TRUE(m.reserve(1, 20));  // 2 pages
  ASSERT_TRUE(m.reserve(2, 48));  // 3 pages
  EXPECT_EQ(m.kv_table(1).size(), 2u);
  EXPECT_EQ(m.index_table(1).size(), 2u);
  EXPECT_NE(m.kv_table(1), m.index_table(1));  // separate tables, as the index cache has
  ASSERT_TRUE(m.reserve(1, 32));               // still 2 pages: nothing new
  EXPECT_EQ(m.kv().num_used(), 5);
  EXPECT_FALSE(m.reserve(3, 16 * 6));  // 6 pages, only 5 free
  EXPECT_EQ(m.kv().num_used(), 5);
  EXPECT_EQ(m.max_tokens_reachable(1), (2 + 5) * 16);
  m.release(1);
  m.release(2);
  EXPECT_EQ(m.kv().num_used(), 0);
  EXPECT_EQ(m.index().num_used(), 0);
  EXPECT_EQ(m.num_requests(), 0);
}

}  // namespace
}  // namespace engine
}  // namespace msa
