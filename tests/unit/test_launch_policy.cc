// The CUDA decode launch policy (core/launch_policy.h) as host functions: its decisions for the
// benchmark's shapes on an H200 and on smaller GPUs, and exact coverage (every index block and
// every attention subtile of every row owned by exactly one CTA) over a sweep of shapes.
#include "core/launch_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace msa {
namespace detail {
namespace {

constexpr int kH200Sms = 132;

// The M3 score kernel (128-dim index keys, tensor cores) keeps 2 CTAs per SM resident.
constexpr int kScoreCtas = 2;
constexpr int64_t kH200Wave = kScoreCtas * kH200Sms;  // 264

TEST(LaunchPolicy, IndexSpreadsSmallBatchesOverOneWave) {
  // Batch 1 at 8K (64 blocks): one block per CTA, every block its own CTA.
  IndexLaunchPlan p = plan_index_launch(1, 64, kH200Sms, kScoreCtas);
  EXPECT_EQ(p.blocks_per_cta, 1);
  EXPECT_EQ(p.chunks, 64);
  // Batch 1 at 128K (1024 blocks): 4 blocks per CTA, 256 CTAs in one wave of 264 (one block
  // per CTA would be 1024 CTAs, ~4 waves of short CTAs).
  p = plan_index_launch(1, 1024, kH200Sms, kScoreCtas);
  EXPECT_EQ(p.blocks_per_cta, 4);
  EXPECT_EQ(p.chunks, 256);
  // Batch 1 at 512K (4096 blocks): 16 blocks per CTA, 256 CTAs.
  p = plan_index_launch(1, 4096, kH200Sms, kScoreCtas);
  EXPECT_EQ(p.blocks_per_cta, 16);
  EXPECT_EQ(p.chunks, 256);
  // Batch 16 at 8K (16 x 64 blocks): 4 blocks per CTA, 16 x 16 = 256 CTAs.
  p = plan_index_launch(16, 64, kH200Sms, kScoreCtas);
  EXPECT_EQ(p.blocks_per_cta, 4);
  EXPECT_EQ(p.row_tiles * p.chunks, 256);
  // Batch 1 at 32K (256 blocks) and batch 4 at 8K: one block per CTA would fit the wave, but as
  // 256 CTAs, more than the 132 SMs: two blocks per CTA, 128 CTAs.
  for (const auto& [tiles, nb] : {std::pair<int64_t, int64_t>{1, 256}, {4, 64}}) {
    p = plan_index_launch(tiles, nb, kH200Sms, kScoreCtas);
    EXPECT_EQ(p.blocks_per_cta, kIndexMinBlocksPerCtaPastSms) << tiles << " x " << nb;
    EXPECT_EQ(p.row_tiles * p.chunks, 128) << tiles << " x " << nb;
  }
  // One block per CTA up to one CTA per SM (batch 1 at 16K: 128 CTAs; 2 rows of 66 blocks: 132).
  EXPECT_EQ(plan_index_launch(1, 128, kH200Sms, kScoreCtas).blocks_per_cta, 1);
  EXPECT_EQ(plan_index_launch(2, 66, kH200Sms, kScoreCtas).blocks_per_cta, 1);
  EXPECT_EQ(plan_index_launch(1, 133, kH200Sms, kScoreCtas).blocks_per_cta, 2);
  // Every other grid that fits a wave at all is the largest such grid: halving blocks_per_cta
  // would overflow the wave.
  for (int64_t tiles : {1, 4, 16, 64}) {
    for (int64_t nb : {64, 256, 1024, 4096}) {
      p = plan_index_launch(tiles, nb, kH200Sms, kScoreCtas);
      if (p.blocks_per_cta == kIndexMaxBlocksPerCta) continue;
      EXPECT_LE(p.row_tiles * p.chunks, kH200Wave) << tiles << " x " << nb;
      if (p.blocks_per_cta == kIndexMinBlocksPerCtaPastSms && tiles * nb <= kH200Wave) {
        EXPECT_GT(tiles * nb, kH200Sms) << tiles << " x " << nb;
      } else if (p.blocks_per_cta > 1) {
        EXPECT_GT(tiles * ((nb + p.blocks_per_cta / 2 - 1) / (p.blocks_per_cta / 2)), kH200Wave)
            << tiles << " x " << nb;
      }
    }
  }
}

TEST(LaunchPolicy, IndexStreamsLargeBatchesInFullCtas) {
  // Batch 64 at 128K: 65536 blocks, more than a wave holds even at 32 per CTA: 2048 CTAs.
  IndexLaunchPlan p = plan_index_launch(64, 1024, kH200Sms, kScoreCtas);
  EXPECT_EQ(p.blocks_per_cta, kIndexMaxBlocksPerCta);
  EXPECT_EQ(p.chunks, 32);
  EXPECT_EQ(p.row_tiles * p.chunks, 2048);
  // A smaller GPU (or a lower occupancy) holds fewer CTAs at once, so the CTAs grow.
  // Batch 1 at 32K (256 blocks) on 16 SMs: a 32-CTA wave, 8 blocks per CTA (2 on the H200).
  const IndexLaunchPlan small = plan_index_launch(1, 256, 16, kScoreCtas);
  const IndexLaunchPlan big = plan_index_launch(1, 256, kH200Sms, kScoreCtas);
  EXPECT_EQ(small.blocks_per_cta, 8);
  EXPECT_EQ(small.chunks, 32);
  EXPECT_EQ(big.blocks_per_cta, 2);
  const IndexLaunchPlan dense = plan_index_launch(4, 1024, kH200Sms, 8);
  EXPECT_LT(dense.blocks_per_cta, plan_index_launch(4, 1024, kH200Sms, kScoreCtas).blocks_per_cta);
  // An occupancy query that failed (0) plans for one CTA per SM.
  EXPECT_EQ(plan_index_launch(4, 1024, kH200Sms, 0).blocks_per_cta,
            plan_index_launch(4, 1024, kH200Sms, 1).blocks_per_cta);
}

TEST(LaunchPolicy, IndexWithNothingToScoreLaunchesNoScoreGrid) {
  const IndexLaunchPlan empty = plan_index_launch(4, 0, kH200Sms, kScoreCtas);
  EXPECT_EQ(empty.chunks, 0);
  EXPECT_EQ(plan_index_launch(0, 64, kH200Sms, kScoreCtas).chunks, 0);
}

// Resident clusters of each size (index = CTAs per cluster) of a 256-thread kernel at 2 CTAs per
// SM on the H200, as cudaOccupancyMaxActiveClusters reports them (a cluster stays within one GPC;
// bench/EXPERIMENTS.md: 2026-11-30-index-cluster-select-ab).
IndexClusterLimits h200_clusters() {
  IndexClusterLimits c;
  c.max_size = 16;
  const int64_t resident[] = {0, 264, 132, 79, 62, 47, 39, 32, 30, 23, 21, 16, 16, 14, 14, 14, 14};
  for (int i = 0; i <= 16; ++i) c.resident[i] = resident[i];
  return c;
}

IndexLaunchPlan plan_decode(int64_t requests, int64_t max_blocks,
                            const IndexClusterLimits& clusters = h200_clusters()) {
  return plan_index_launch(requests, max_blocks, kH200Sms, kScoreCtas, true, clusters);
}

TEST(LaunchPolicy, IndexSelectsInClusterWhereOneWaveOfClustersFits) {
  // Batch 8 at 8K: 256 two-block CTAs fill the wave; at 4 blocks per CTA each request is one
  // 16-CTA cluster, and 8 of the 14 resident ones.
  IndexLaunchPlan p = plan_decode(8, 64);
  EXPECT_TRUE(p.cluster_select);
  EXPECT_EQ(p.blocks_per_cta, 4);
  EXPECT_EQ(p.chunks, 16);
  // Batch 16 at 2K (16 blocks): 16 clusters of 16 do not fit at once, 16 of 8 two-block CTAs do.
  p = plan_decode(16, 16);
  EXPECT_TRUE(p.cluster_select);
  EXPECT_EQ(p.blocks_per_cta, 2);
  EXPECT_EQ(p.chunks, 8);
  // Batch 200 at 1K: one CTA owns a request (a cluster of one).
  p = plan_decode(200, 8);
  EXPECT_TRUE(p.cluster_select);
  EXPECT_EQ(p.chunks, 1);
  EXPECT_EQ(p.blocks_per_cta, 8);
}

TEST(LaunchPolicy, IndexKeepsTheSelectKernelElsewhere) {
  // Batch 1 at 8K: 64 CTAs, a quarter of a wave, keep one block each (a 16-CTA cluster of
  // 4-block CTAs was slower).
  IndexLaunchPlan p = plan_decode(1, 64);
  EXPECT_FALSE(p.cluster_select);
  EXPECT_EQ(p.blocks_per_cta, 1);
  EXPECT_EQ(p.chunks, 64);
  // Batch 16 at 8K: 16 clusters of 16 four-block CTAs do not fit at once (14), and 8-block CTAs
  // are past the growth limit.
  p = plan_decode(16, 64);
  EXPECT_FALSE(p.cluster_select);
  EXPECT_EQ(p.blocks_per_cta, 4);
  EXPECT_EQ(p.chunks, 16);
  // Batch 64 at 8K: 64 clusters of 4 sixteen-block CTAs, 62 resident.
  EXPECT_FALSE(plan_decode(64, 64).cluster_select);
  // Batch 1 at 32K: 128 two-block CTAs would have to become 16-block ones.
  EXPECT_FALSE(plan_decode(1, 256).cluster_select);
  // Batch 4 at 8K: 128 two-block CTAs fill half a wave, short of the growth to 4-block ones.
  p = plan_decode(4, 64);
  EXPECT_FALSE(p.cluster_select);
  EXPECT_EQ(p.blocks_per_cta, 2);
  EXPECT_EQ(p.chunks, 32);
  // Tables wider than the rank selection's 256 columns, prefill, and devices without clusters
  // (or with the portable 8 only, where batch 8 at 8K would need 16).
  EXPECT_FALSE(plan_decode(1, 257).cluster_select);
  EXPECT_FALSE(
      plan_index_launch(8, 64, kH200Sms, kScoreCtas, false, h200_clusters()).cluster_select);
  EXPECT_FALSE(plan_decode(8, 64, IndexClusterLimits{}).cluster_select);
  IndexClusterLimits portable = h200_clusters();
  portable.max_size = 8;
  EXPECT_FALSE(plan_decode(8, 64, portable).cluster_select);
  // Without clusters the plan is the one-wave plan.
  const IndexLaunchPlan plain = plan_index_launch(8, 64, kH200Sms, kScoreCtas);
  EXPECT_EQ(plan_decode(8, 64, IndexClusterLimits{}).blocks_per_cta, plain.blocks_per_cta);
}

TEST(LaunchPolicy, IndexLaunchesTheSelectKernelEarlyOnlyAfterShortScoreCtas) {
  // One-wave grids of CTAs of at most 4 blocks over tables of at most 256 columns: the select
  // kernel may start with the score CTAs. Batch 1 at 8K (64 one-block CTAs), batch 16 at 8K and
  // batch 4 at 32K (256 four-block CTAs).
  EXPECT_TRUE(plan_decode(1, 64).early_select);
  EXPECT_TRUE(plan_decode(16, 64).early_select);
  EXPECT_TRUE(plan_decode(4, 256).early_select);
  // Batch 1 at 128K: 256 four-block CTAs, but 1024 columns (sampled-candidate selection).
  EXPECT_FALSE(plan_decode(1, 1024).early_select);
  // 16-block CTAs (batch 16 at 32K, batch 64 at 8K, batch 1 at 512K) and full 32-block CTAs in
  // waves (batch 64 at 128K): only once the score CTAs have scored their blocks.
  EXPECT_FALSE(plan_decode(16, 256).early_select);
  EXPECT_FALSE(plan_decode(64, 64).early_select);
  EXPECT_FALSE(plan_decode(1, 4096).early_select);
  EXPECT_FALSE(plan_decode(64, 1024).early_select);
  // An in-cluster selection has no select kernel (batch 8 at 8K).
  const IndexLaunchPlan cluster = plan_decode(8, 64);
  EXPECT_TRUE(cluster.cluster_select);
  EXPECT_FALSE(cluster.early_select);
  // Prefill and devices without clusters follow the same rule.
  EXPECT_TRUE(plan_index_launch(4, 64, kH200Sms, kScoreCtas).early_select);
  EXPECT_FALSE(plan_index_launch(4, 1024, kH200Sms, kScoreCtas).early_select);
}

TEST(LaunchPolicy, IndexCoversEveryBlockExactlyOnce) {
  const IndexClusterLimits clusters = h200_clusters();
  for (int sms : {1, 16, 132}) {
    for (int ctas : {1, 2, 8}) {
      for (int64_t tiles : {1, 3, 4, 16, 64, 257}) {
        for (int64_t max_blocks : {1, 2, 7, 16, 63, 64, 65, 256, 1000, 1024, 4096}) {
          const IndexLaunchPlan p = plan_index_launch(tiles, max_blocks, sms, ctas, sms == 132,
                                                      sms == 132 ? clusters : IndexClusterLimits{});
          ASSERT_GE(p.blocks_per_cta, 1);
          ASSERT_LE(p.blocks_per_cta, kIndexMaxBlocksPerCta);
          if (p.cluster_select) {
            // One cluster per request, all resident at once, over a table the rank path serves.
            EXPECT_LE(p.chunks, clusters.max_size);
            EXPECT_LE(tiles, clusters.resident[p.chunks]);
            EXPECT_LE(max_blocks, kIndexClusterSelectMaxBlocks);
          }
          std::vector<int> owners(static_cast<size_t>(max_blocks), 0);
          for (int64_t c = 0; c < p.chunks; ++c) {
            const BlockRange r = index_cta_blocks(p, c, max_blocks);
            EXPECT_LT(r.begin, r.end) << "empty CTA " << c;
            for (int64_t b = r.begin; b < r.end; ++b) ++owners[static_cast<size_t>(b)];
          }
          for (int64_t b = 0; b < max_blocks; ++b) {
            ASSERT_EQ(owners[static_cast<size_t>(b)], 1)
                << "block " << b << " tiles " << tiles << " max_blocks " << max_blocks << " sms "
                << sms << " ctas " << ctas;
          }
        }
      }
    }
  }
}

TEST(LaunchPolicy, IndexBalancesDecodeGridsPastOneWave) {
  // Batch 64 at 128K with a balanced-capable scorer: one wave of 264 CTAs sharing the blocks.
  IndexLaunchPlan p = plan_index_launch(64, 1024, kH200Sms, kScoreCtas, true, {}, kScoreCtas);
  EXPECT_EQ(p.balanced_ctas, kH200Wave);
  EXPECT_FALSE(p.early_select);
  // The balanced kernel's own occupancy sizes the wave.
  EXPECT_EQ(plan_index_launch(64, 1024, kH200Sms, kScoreCtas, true, {}, 1).balanced_ctas, kH200Sms);
  // Batch 4 at 512K, 16 at 128K and 64 at 32K also take more than a wave of 32-block CTAs.
  for (const auto& [tiles, nb] : {std::pair<int64_t, int64_t>{4, 4096}, {16, 1024}, {64, 256}}) {
    EXPECT_GT(
        plan_index_launch(tiles, nb, kH200Sms, kScoreCtas, true, {}, kScoreCtas).balanced_ctas, 0)
        << tiles << " x " << nb;
  }
  // Static grids: one wave already holds the blocks (batch 1 at 512K, 16 at 32K), no
  // balanced-capable scorer (bf16 keys: 0), prefill, or too many requests for the prefix sums.
  EXPECT_EQ(plan_index_launch(1, 4096, kH200Sms, kScoreCtas, true, {}, kScoreCtas).balanced_ctas,
            0);
  EXPECT_EQ(plan_index_launch(16, 256, kH200Sms, kScoreCtas, true, {}, kScoreCtas).balanced_ctas,
            0);
  EXPECT_EQ(plan_index_launch(64, 1024, kH200Sms, kScoreCtas, true, {}, 0).balanced_ctas, 0);
  EXPECT_EQ(plan_index_launch(64, 1024, kH200Sms, kScoreCtas, false, {}, kScoreCtas).balanced_ctas,
            0);
  EXPECT_EQ(plan_index_launch(kIndexBalancedMaxRequests + 1, 1024, kH200Sms, kScoreCtas, true, {},
                              kScoreCtas)
                .balanced_ctas,
            0);
}

// Static grids of 16-block CTAs take the 32-key-tile scorer where the problem has one (batch 64 at
// 8K, 16 at 32K, 4 at 128K, 1 at 512K on the H200); grids of 2-8-block CTAs (batch 4, 16 and 32
// at 8K, 1 and 4 at 32K, 1 at 128K), balanced and in-cluster grids and empty plans do not.
TEST(LaunchPolicy, IndexStaticWideTilesOnlyForLongCtas) {
  const int64_t wave = kH200Wave;
  for (const auto& [tiles, nb] :
       {std::pair<int64_t, int64_t>{64, 64}, {16, 256}, {4, 1024}, {1, 4096}}) {
    const IndexLaunchPlan p = plan_decode(tiles, nb);
    EXPECT_EQ(p.blocks_per_cta, kIndexWideTileMinBlocksPerCta) << tiles << " x " << nb;
    EXPECT_TRUE(index_static_wide_tiles(p, wave)) << tiles << " x " << nb;
  }
  for (const auto& [tiles, nb] :
       {std::pair<int64_t, int64_t>{4, 64}, {16, 64}, {32, 64}, {1, 256}, {4, 256}, {1, 1024}}) {
    const IndexLaunchPlan p = plan_decode(tiles, nb);
    EXPECT_LT(p.blocks_per_cta, kIndexWideTileMinBlocksPerCta) << tiles << " x " << nb;
    EXPECT_FALSE(index_static_wide_tiles(p, wave)) << tiles << " x " << nb;
  }
  const IndexLaunchPlan balanced =
      plan_index_launch(64, 1024, kH200Sms, kScoreCtas, true, {}, kScoreCtas);
  ASSERT_GT(balanced.balanced_ctas, 0);
  EXPECT_FALSE(index_static_wide_tiles(balanced, wave));
  IndexLaunchPlan clustered = plan_decode(8, 64);
  ASSERT_TRUE(clustered.cluster_select);
  clustered.blocks_per_cta = kIndexWideTileMinBlocksPerCta;
  EXPECT_FALSE(index_static_wide_tiles(clustered, wave));
  EXPECT_FALSE(index_static_wide_tiles(plan_decode(0, 4096), wave));
}

// A 16-key instance with three CTAs per SM (head dim 64) sizes the grid for its own wave: five
// 128K requests take 320 16-block CTAs, one wave of it but not of the two-CTA 32-key instance,
// which then is not used; four take 256, which fit both.
TEST(LaunchPolicy, IndexStaticWideTilesFitTheirOwnWave) {
  const int64_t wide_wave = kH200Wave;
  const IndexLaunchPlan five = plan_index_launch(5, 1024, kH200Sms, 3, true);
  ASSERT_EQ(five.blocks_per_cta, kIndexWideTileMinBlocksPerCta);
  ASSERT_EQ(five.row_tiles * five.chunks, 320);
  EXPECT_FALSE(index_static_wide_tiles(five, wide_wave));
  EXPECT_TRUE(index_static_wide_tiles(five, 3 * kH200Sms));
  const IndexLaunchPlan four = plan_index_launch(4, 1024, kH200Sms, 3, true);
  ASSERT_EQ(four.blocks_per_cta, kIndexWideTileMinBlocksPerCta);
  EXPECT_TRUE(index_static_wide_tiles(four, wide_wave));
}

// A balanced CTA's pieces hold as many blocks as its shared block maxima allow for the call's
// (row, head) query vectors, up to 256 (the page ids' limit), and never fewer than a static CTA.
TEST(LaunchPolicy, IndexBalancedPiecesFillTheBlockMaxima) {
  EXPECT_EQ(balanced_piece_blocks(1), 256);
  EXPECT_EQ(balanced_piece_blocks(4), 256);
  EXPECT_EQ(balanced_piece_blocks(8), 128);
  EXPECT_EQ(balanced_piece_blocks(16), 64);
  EXPECT_EQ(balanced_piece_blocks(32), kIndexMaxBlocksPerCta);
  for (int64_t rh = 1; rh <= 32; ++rh) {
    EXPECT_LE(balanced_piece_blocks(rh) * rh, kIndexScoreMaxBlockHeads) << rh;
    EXPECT_GE(balanced_piece_blocks(rh), kIndexMaxBlocksPerCta) << rh;
  }
}

// The walk of every CTA of a balanced grid, as the score kernel runs it (balanced_units,
// balanced_share, balanced_first, balanced_piece), with and without lead units: every visible
// block of every request is scored by exactly one CTA, in pieces of at most balanced_piece_blocks
// blocks of one request, exactly one piece of every request starts at its block 0 (that CTA
// reports a bad length), the shares differ by at most one unit, and a CTA scores exactly the
// block units of its share (those past the lead units of their request).
TEST(LaunchPolicy, IndexBalancedSharesCoverEveryBlockOnce) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 90; ++trial) {
    const int32_t lead = std::array<int32_t, 5>{0, 1, 2, 4, 7}[static_cast<size_t>(trial % 5)];
    const int64_t bs = trial % 2 ? 128 : 64;
    const int32_t piece_blocks = balanced_piece_blocks(int64_t{1} << (trial % 6));  // 1..32 heads
    const int64_t max_blocks = 1 + static_cast<int64_t>(rng() % (trial % 3 ? 300 : 1200));
    const auto nreq = static_cast<int32_t>(1 + rng() % 200);
    std::vector<int64_t> lens(static_cast<size_t>(nreq));
    for (int64_t& len : lens) {
      switch (rng() % 5) {
        case 0:
          len = 0;  // a padding request
          break;
        case 1:
          len = max_blocks * bs + 1 + static_cast<int64_t>(rng() % 100);  // bad: past the table
          break;
        default:
          len = static_cast<int64_t>(rng() % static_cast<uint64_t>(max_blocks * bs + 1));
      }
    }
    std::vector<int32_t> ends(static_cast<size_t>(nreq));
    int32_t total = 0;
    for (int32_t r = 0; r < nreq; ++r) {
      total +=
          static_cast<int32_t>(balanced_units(lens[static_cast<size_t>(r)], bs, max_blocks, lead));
      ends[static_cast<size_t>(r)] = total;
    }
    // Up to past a grid of three CTAs per SM on the H200 (396).
    const int64_t ctas = 1 + static_cast<int64_t>(rng() % 420);
    std::vector<std::vector<int>> owners(static_cast<size_t>(nreq));
    for (int32_t r = 0; r < nreq; ++r) {
      const int64_t start = r == 0 ? 0 : ends[static_cast<size_t>(r) - 1];
      owners[static_cast<size_t>(r)].assign(
          static_cast<size_t>(ends[static_cast<size_t>(r)] - start - lead), 0);
    }
    std::vector<int> starts(static_cast<size_t>(nreq), 0);
    for (int64_t cta = 0; cta < ctas; ++cta) {
      const BlockRange share = balanced_share(total, ctas, cta);
      EXPECT_LE(share.end - share.begin, (total + ctas - 1) / ctas);
      EXPECT_GE(share.end - share.begin, total / ctas);
      int64_t scored = 0, block_units = 0;
      for (int64_t u = share.begin; u < share.end; ++u) {
        int32_t r = 0;
        while (ends[static_cast<size_t>(r)] <= u) ++r;
        block_units += u - (r == 0 ? 0 : ends[static_cast<size_t>(r) - 1]) >= lead ? 1 : 0;
      }
      BalancedCursor at = balanced_first(ends.data(), nreq, share, lead);
      int32_t bpc = 0;
      BalancedCursor next;
      while (balanced_piece(ends.data(), nreq, share, piece_blocks, lead, at, &bpc, &next)) {
        ASSERT_GE(bpc, 1);
        ASSERT_LE(bpc, piece_blocks);
        std::vector<int>& own = owners[static_cast<size_t>(at.tile)];
        ASSERT_LE(static_cast<size_t>(at.b0 + bpc), own.size());
        for (int32_t b = at.b0; b < at.b0 + bpc; ++b) ++own[static_cast<size_t>(b)];
        if (at.b0 == 0) ++starts[static_cast<size_t>(at.tile)];
        scored += bpc;
        at = next;
      }
      EXPECT_EQ(scored, block_units) << "cta " << cta << " lead " << lead;
    }
    for (int32_t r = 0; r < nreq; ++r) {
      const int64_t len = lens[static_cast<size_t>(r)];
      const int64_t visible = len > 0 ? std::min((len + bs - 1) / bs, max_blocks) : 0;
      const std::vector<int>& own = owners[static_cast<size_t>(r)];
      ASSERT_EQ(own.size(), static_cast<size_t>(std::max<int64_t>(visible, 1))) << "request " << r;
      for (size_t b = 0; b < own.size(); ++b) {
        ASSERT_EQ(own[b], 1) << "request " << r << " block " << b << " trial " << trial;
      }
      EXPECT_EQ(starts[static_cast<size_t>(r)], 1) << "request " << r;
    }
  }
}

// Lead units: 64 KB of keys in blocks (2 for M3's bf16 128 x 128 blocks, 4 for e4m3), at least
// 0 and at most kIndexBalancedMaxLeadUnits. With them, of three CTAs over two requests of 100
// blocks, the one whose share reaches from the first request into the second scores fewer blocks
// than the others: 204 units, shares of 68; CTA 0 owns the first request's 2 lead units and
// blocks 0-65, CTA 1 blocks 66-99 and, after the second request's lead units, its blocks 0-31,
// CTA 2 blocks 32-99.
TEST(LaunchPolicy, IndexBalancedLeadUnitsShortenStraddlingShares) {
  EXPECT_EQ(balanced_lead_units(128 * 128 * 2), 2);
  EXPECT_EQ(balanced_lead_units(128 * 128), 4);
  EXPECT_EQ(balanced_lead_units(64 * 64), 16);
  EXPECT_EQ(balanced_lead_units(int64_t{1} << 20), 0);
  EXPECT_EQ(balanced_lead_units(16), kIndexBalancedMaxLeadUnits);
  EXPECT_EQ(balanced_lead_units(0), 0);
  EXPECT_EQ(balanced_units(100 * 128, 128, 1024, 2), 102);
  EXPECT_EQ(balanced_units(0, 128, 1024, 2), 3);
  const std::array<int32_t, 2> ends{102, 204};
  const std::array<std::vector<std::array<int32_t, 3>>, 3> want{
      std::vector<std::array<int32_t, 3>>{{0, 0, 66}},
      std::vector<std::array<int32_t, 3>>{{0, 66, 34}, {1, 0, 32}},
      std::vector<std::array<int32_t, 3>>{{1, 32, 68}}};
  for (int64_t cta = 0; cta < 3; ++cta) {
    const BlockRange share = balanced_share(204, 3, cta);
    std::vector<std::array<int32_t, 3>> pieces;  // (request, first block, blocks)
    BalancedCursor at = balanced_first(ends.data(), 2, share, 2);
    int32_t bpc = 0;
    BalancedCursor next;
    while (balanced_piece(ends.data(), 2, share, 256, 2, at, &bpc, &next)) {
      pieces.push_back({at.tile, at.b0, bpc});
      at = next;
    }
    EXPECT_EQ(pieces, want[static_cast<size_t>(cta)]) << "cta " << cta;
  }
  // A share of lead units alone has no piece.
  const BalancedCursor at = balanced_first(ends.data(), 2, BlockRange{102, 104}, 2);
  int32_t bpc = 0;
  BalancedCursor next;
  EXPECT_FALSE(balanced_piece(ends.data(), 2, BlockRange{102, 104}, 256, 2, at, &bpc, &next));
}

TEST(LaunchPolicy, AttentionSplitsSmallBatchesWithinOneWave) {
  // M3 TP4 decode: 16 q heads on 1 KV head = 1 head group; top-16 of 128-token blocks = 128
  // subtiles per row. No clusters: every split plan uses the merge kernel.
  const int64_t sub = 16 * 128 / 16;
  // Batch 1: 32 splits of 4 subtiles (one per warp) within the 264-CTA target.
  AttnLaunchPlan p = plan_attention_launch(1, 1, sub, kH200Sms);
  EXPECT_EQ(p.splits, 32);
  EXPECT_EQ(p.subtiles_per_split, 4);
  EXPECT_FALSE(p.cluster);
  p = plan_attention_launch(16, 1, sub, kH200Sms);  // batch 16: 16 rows x 16 splits = 256 CTAs
  EXPECT_EQ(p.splits, 16);
  EXPECT_LE(p.rows * p.splits, kAttnCtasPerSm * kH200Sms);
  p = plan_attention_launch(64, 1, sub, kH200Sms);  // batch 64: 4 splits of 32 subtiles
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.subtiles_per_split, 32);
  p = plan_attention_launch(256, 1, sub, kH200Sms);  // batch 64 x 4 speculative rows: no split
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.subtiles_per_split, sub);
  // Pieces are whole warps' worth of subtiles.
  for (int64_t rows = 1; rows <= 300; ++rows) {
    const AttnLaunchPlan q = plan_attention_launch(rows, 1, sub, kH200Sms);
    EXPECT_LE(q.splits, kAttnMaxSplits) << rows;
    if (q.splits > 1) {
      EXPECT_EQ(q.subtiles_per_split % kAttnWarpsPerCta, 0) << rows;
      EXPECT_LE(q.rows * q.splits, kAttnCtasPerSm * kH200Sms) << rows;
    }
  }
}

TEST(LaunchPolicy, AttentionRunsOneBlockPerCtaWhereAWaveHoldsEveryEntry) {
  const int64_t sub = 16 * 128 / 16;  // top-16 of 128-key blocks
  const AttnClusterLimits h200{16, 14};
  // Batch 1-16 (and 1-4 with 4 speculative rows): a split per list entry, ahead of the
  // in-cluster and merge-kernel plans.
  for (int64_t rows : {1, 4, 14, 16}) {
    const AttnLaunchPlan p = plan_attention_launch(rows, 1, sub, kH200Sms, h200, 16);
    EXPECT_TRUE(p.block_ctas) << rows;
    EXPECT_FALSE(p.cluster) << rows;
    EXPECT_EQ(p.splits, 16) << rows;
    EXPECT_EQ(p.subtiles_per_split, 8) << rows;
  }
  // Batch 17 and up: 17 x 16 CTAs pass the 264 of one wave; the 4-warp kernel's plans.
  AttnLaunchPlan p = plan_attention_launch(17, 1, sub, kH200Sms, h200, 16);
  EXPECT_FALSE(p.block_ctas);
  EXPECT_EQ(p.splits, 11);  // 15 pieces wanted: 11 splits of 12 subtiles
  p = plan_attention_launch(64, 1, sub, kH200Sms, h200, 16);
  EXPECT_FALSE(p.block_ctas);
  EXPECT_EQ(p.splits, 4);
  // Calls the kernel cannot run (block_entries 0) keep their plans.
  p = plan_attention_launch(1, 1, sub, kH200Sms, h200, 0);
  EXPECT_FALSE(p.block_ctas);
  EXPECT_TRUE(p.cluster);
  // Head groups count as rows: TP1 (4 KV heads) at batch 4 is 16 row-groups.
  p = plan_attention_launch(4, 4, sub, kH200Sms, h200, 16);
  EXPECT_TRUE(p.block_ctas);
  p = plan_attention_launch(5, 4, sub, kH200Sms, h200, 16);
  EXPECT_FALSE(p.block_ctas);
  // A top-2 row: two splits of one block each; a top-1 row needs no split.
  p = plan_attention_launch(1, 1, 16, kH200Sms, h200, 2);
  EXPECT_TRUE(p.block_ctas);
  EXPECT_EQ(p.splits, 2);
  EXPECT_EQ(p.subtiles_per_split, 8);
  p = plan_attention_launch(1, 1, 8, kH200Sms, h200, 1);
  EXPECT_FALSE(p.block_ctas);
  // Every block plan covers each subtile of the row exactly once, one list entry per split,
  // within one wave and the merge kernel's split limit.
  for (int64_t rows = 1; rows <= 300; ++rows) {
    for (int64_t w : {2, 3, 16, 32, 64, 65}) {
      const AttnLaunchPlan q = plan_attention_launch(rows, 1, 8 * w, kH200Sms, h200, w);
      if (!q.block_ctas) continue;
      EXPECT_LE(q.rows * q.splits, kAttnCtasPerSm * kH200Sms) << rows << " " << w;
      EXPECT_LE(q.splits, kAttnMaxSplits) << rows << " " << w;
      EXPECT_EQ(q.splits, w) << rows;
      int64_t covered = 0;
      for (int64_t s = 0; s < q.splits; ++s) {
        const BlockRange r = attention_split_subtiles(q, s, 8 * w);
        EXPECT_EQ(r.begin, covered) << rows << " " << w << " " << s;
        EXPECT_EQ(r.end - r.begin, 8) << rows << " " << w << " " << s;
        covered = r.end;
      }
      EXPECT_EQ(covered, 8 * w) << rows << " " << w;
    }
  }
}

TEST(LaunchPolicy, AttentionMergesInClusterWhereOneWaveOfClustersHoldsTheBatch) {
  const int64_t sub = 16 * 128 / 16;
  // The H200 keeps 14 clusters of 16 attention CTAs resident.
  const AttnClusterLimits h200{16, 14};
  // Batch 1 and 4 (also 1 x 4 speculative rows): one cluster of 16 splits of 8 subtiles per row.
  for (int64_t rows : {1, 4, 14}) {
    const AttnLaunchPlan p = plan_attention_launch(rows, 1, sub, kH200Sms, h200);
    EXPECT_TRUE(p.cluster) << rows;
    EXPECT_EQ(p.splits, 16) << rows;
    EXPECT_EQ(p.subtiles_per_split, 8) << rows;
  }
  // Batch 16: 16 clusters do not fit at once; the merge kernel plan (16 splits of 8).
  AttnLaunchPlan p = plan_attention_launch(16, 1, sub, kH200Sms, h200);
  EXPECT_FALSE(p.cluster);
  EXPECT_EQ(p.splits, 16);
  // Batch 64: 4 merge-kernel splits, as without clusters.
  p = plan_attention_launch(64, 1, sub, kH200Sms, h200);
  EXPECT_FALSE(p.cluster);
  EXPECT_EQ(p.splits, 4);
  // Only 8-CTA clusters: splits of 16 subtiles would be too long, so the merge kernel.
  p = plan_attention_launch(1, 1, sub, kH200Sms, AttnClusterLimits{8, 30});
  EXPECT_FALSE(p.cluster);
  EXPECT_EQ(p.splits, 32);
  // ... but a top-8 row (64 subtiles) fits 8 splits of 8.
  p = plan_attention_launch(1, 1, sub / 2, kH200Sms, AttnClusterLimits{8, 30});
  EXPECT_TRUE(p.cluster);
  EXPECT_EQ(p.splits, 8);
  // A short row: a cluster of as many splits as it has 4-subtile pieces.
  p = plan_attention_launch(1, 1, 6, kH200Sms, h200);
  EXPECT_TRUE(p.cluster);
  EXPECT_EQ(p.splits, 2);
  EXPECT_EQ(p.subtiles_per_split, 4);
  // Cluster plans never exceed the cluster size or the per-split limit.
  for (int64_t rows = 1; rows <= 300; ++rows) {
    for (int64_t s : {5, 16, 64, 128, 256}) {
      const AttnLaunchPlan q = plan_attention_launch(rows, 1, s, kH200Sms, h200);
      if (!q.cluster) continue;
      EXPECT_LE(rows, h200.resident) << rows;
      EXPECT_GE(q.splits, 2) << rows << " " << s;
      EXPECT_LE(q.splits, h200.max_splits) << rows << " " << s;
      EXPECT_LE(q.subtiles_per_split, kAttnClusterMaxSubtiles) << rows << " " << s;
    }
  }
}

TEST(LaunchPolicy, AttentionCoversEverySubtileExactlyOnce) {
  for (int sms : {1, 16, 132}) {
    for (int64_t rows : {1, 2, 3, 5, 16, 64, 100, 264, 1000}) {
      for (int64_t groups : {1, 2, 8}) {
        for (int64_t sub : {1, 4, 8, 100, 128, 2048}) {
          for (const AttnClusterLimits limits :
               {AttnClusterLimits{}, AttnClusterLimits{8, 30}, AttnClusterLimits{16, 14}}) {
            const AttnLaunchPlan p = plan_attention_launch(rows, groups, sub, sms, limits);
            ASSERT_GE(p.splits, 1);
            std::vector<int> owners(static_cast<size_t>(sub), 0);
            for (int64_t s = 0; s < p.splits; ++s) {
              const BlockRange r = attention_split_subtiles(p, s, sub);
              EXPECT_LT(r.begin, r.end) << "empty split " << s;
              for (int64_t i = r.begin; i < r.end; ++i) ++owners[static_cast<size_t>(i)];
            }
            for (int64_t i = 0; i < sub; ++i) {
              ASSERT_EQ(owners[static_cast<size_t>(i)], 1)
                  << "subtile " << i << " rows " << rows << " groups " << groups << " sms " << sms
                  << " cluster limit " << limits.max_splits;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace detail
}  // namespace msa

namespace msa {
namespace detail {
namespace {

// Batch-invariant plans depend on the row's subtile capacity only: the same pieces for any
// batch, 32 subtiles (4 blocks of 128 keys) each, merged by kernel, no cluster or one-block CTAs.
TEST(AttentionLaunchPolicy, InvariantPlanIgnoresTheBatch) {
  for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{100000}}) {
    const AttnLaunchPlan p = plan_attention_invariant(rows, 128);
    EXPECT_EQ(p.rows, rows);
    EXPECT_EQ(p.splits, 4);
    EXPECT_EQ(p.subtiles_per_split, 32);
    EXPECT_FALSE(p.cluster);
    EXPECT_FALSE(p.block_ctas);
  }
  const AttnLaunchPlan one = plan_attention_invariant(5, 16);  // top-2 of 128-key blocks
  EXPECT_EQ(one.splits, 1);
  EXPECT_EQ(one.subtiles_per_split, 16);
  // Lists longer than kAttnMaxSplits pieces of 32: pieces grow (whole warps), count capped.
  const AttnLaunchPlan wide = plan_attention_invariant(3, 256 * 8);
  EXPECT_LE(wide.splits, kAttnMaxSplits);
  EXPECT_EQ(wide.subtiles_per_split % kAttnWarpsPerCta, 0);
  EXPECT_GE(wide.splits * wide.subtiles_per_split, 256 * 8);
}

}  // namespace
}  // namespace detail
}  // namespace msa

namespace msa {
namespace detail {
namespace {

TEST(PrefillKernelChoice, ParsesTheEnvironmentValue) {
  EXPECT_EQ(parse_prefill_choice(nullptr), PrefillChoice::kDefault);
  EXPECT_EQ(parse_prefill_choice(""), PrefillChoice::kDefault);
  EXPECT_EQ(parse_prefill_choice("tc"), PrefillChoice::kTensorCores);
  EXPECT_EQ(parse_prefill_choice("simt"), PrefillChoice::kSimt);
  EXPECT_EQ(parse_prefill_choice("TC"), PrefillChoice::kDefault);
  EXPECT_EQ(parse_prefill_choice("tcx"), PrefillChoice::kDefault);
}

// By default every supported prefill call takes the tensor cores except sparse attention over
// e4m3 caches without the per-call bf16 copy; "tc" takes them everywhere, "simt" nowhere.
TEST(PrefillKernelChoice, DefaultsPerFormAndDtype) {
  for (bool copied : {false, true}) {
    const auto takes = [copied](PrefillChoice c, bool sparse, DType dt) {
      return prefill_attention_takes_tensor_cores(c, sparse, dt, copied);
    };
    for (bool sparse : {false, true}) {
      for (DType dt : {DType::kBF16, DType::kF16}) {
        EXPECT_TRUE(takes(PrefillChoice::kDefault, sparse, dt));
      }
      for (DType dt : {DType::kBF16, DType::kF16, DType::kE4M3}) {
        EXPECT_TRUE(takes(PrefillChoice::kTensorCores, sparse, dt));
        EXPECT_FALSE(takes(PrefillChoice::kSimt, sparse, dt));
      }
    }
    EXPECT_TRUE(takes(PrefillChoice::kDefault, false, DType::kE4M3));
    EXPECT_EQ(takes(PrefillChoice::kDefault, true, DType::kE4M3), copied);
  }
  EXPECT_TRUE(prefill_index_takes_tensor_cores(PrefillChoice::kDefault));
  EXPECT_TRUE(prefill_index_takes_tensor_cores(PrefillChoice::kTensorCores));
  EXPECT_FALSE(prefill_index_takes_tensor_cores(PrefillChoice::kSimt));
}

// The prefill index's per-call f16 key copy: num_requests * 8192 <= heads * rows; its reservation
// grows with every capacity and covers every call that copies.
TEST(PrefillKvCopy, IndexKeyChoiceAndReservation) {
  EXPECT_TRUE(prefill_index_keys_copied(1, 1, 8192));
  EXPECT_FALSE(prefill_index_keys_copied(1, 1, 8191));
  EXPECT_TRUE(prefill_index_keys_copied(3, 32, 803));
  EXPECT_FALSE(prefill_index_keys_copied(0, 1, 65536));
  EXPECT_EQ(prefill_index_key_copy_requests(256, 1, 8192), 1);
  EXPECT_EQ(prefill_index_key_copy_requests(2, 32, 300), 1);
  for (int64_t r : {1, 2, 3, 8, 64}) {
    for (int64_t h : {1, 2, 32}) {
      for (int64_t t : {1, 256, 300, 8192, 70000}) {
        const int64_t here = prefill_index_key_copy_requests(r, h, t);
        if (prefill_index_keys_copied(r, h, t)) {
          EXPECT_EQ(here, r);
        }
        EXPECT_LE(here, prefill_index_key_copy_requests(r + 1, h, t));
        EXPECT_LE(here, prefill_index_key_copy_requests(r, h, t + 1));
      }
    }
  }
}

// The per-call bf16 copy of an e4m3 cache: at least 8 rows per block-table page, sparse calls
// up to 256 blocks, never batch invariant or 16-bit; its reservation grows with every capacity
// and covers every call within them that uses it.
TEST(PrefillKvCopy, ChoiceAndReservation) {
  const DType e4m3 = DType::kE4M3;
  EXPECT_TRUE(prefill_kv_copied(false, false, e4m3, 1, 512, 65536));
  EXPECT_TRUE(prefill_kv_copied(false, false, e4m3, 1, 1024, 8192));  // 8K after 120K
  EXPECT_FALSE(prefill_kv_copied(false, false, e4m3, 1, 1024, 8191));
  EXPECT_FALSE(prefill_kv_copied(false, true, e4m3, 1, 512, 65536));
  EXPECT_FALSE(prefill_kv_copied(false, false, DType::kBF16, 1, 512, 65536));
  EXPECT_FALSE(prefill_kv_copied(false, false, e4m3, 0, 512, 65536));
  EXPECT_TRUE(prefill_kv_copied(true, false, e4m3, 8, 256, 106496));
  EXPECT_FALSE(prefill_kv_copied(true, false, e4m3, 1, 257, 65536));
  EXPECT_EQ(prefill_kv_copy_pages(false, e4m3, 8, 256, 106496), 2048);
  EXPECT_EQ(prefill_kv_copy_pages(false, e4m3, 256, 1024, 8192), 1024);
  EXPECT_EQ(prefill_kv_copy_pages(true, e4m3, 1, 512, 65536), 0);
  EXPECT_EQ(prefill_kv_copy_pages(false, DType::kBF16, 1, 512, 65536), 0);
  const int64_t reqs[] = {1, 2, 3, 8, 64}, widths[] = {1, 16, 129, 256, 257, 1024};
  const int64_t rows[] = {1, 100, 1000, 8192, 70000};
  for (bool sparse : {false, true}) {
    for (int64_t r : reqs) {
      for (int64_t mb : widths) {
        for (int64_t t : rows) {
          const int64_t here = prefill_kv_copy_pages(false, e4m3, r, mb, t);
          if (prefill_kv_copied(sparse, false, e4m3, r, mb, t)) {
            EXPECT_GE(here, r * mb) << r << " x " << mb << ", " << t << " rows";
          }
          EXPECT_LE(here, prefill_kv_copy_pages(false, e4m3, r + 1, mb, t));
          EXPECT_LE(here, prefill_kv_copy_pages(false, e4m3, r, mb + 1, t));
          EXPECT_LE(here, prefill_kv_copy_pages(false, e4m3, r, mb, t + 1));
        }
      }
    }
  }
}

TEST(DecodeStepChoice, ParsesTheEnvironmentValue) {
  EXPECT_EQ(parse_decode_step_choice(nullptr), DecodeStepChoice::kDefault);
  EXPECT_EQ(parse_decode_step_choice(""), DecodeStepChoice::kDefault);
  EXPECT_EQ(parse_decode_step_choice("Persistent"), DecodeStepChoice::kDefault);
  EXPECT_EQ(parse_decode_step_choice("persistent"), DecodeStepChoice::kPersistent);
  EXPECT_EQ(parse_decode_step_choice("chain"), DecodeStepChoice::kChain);
}

// By default the two ops; "persistent" takes the kernel exactly where the attention op would take
// one CTA per selected block (rows x head groups x width <= 2 per SM) and the call is not batch
// invariant, and is not supported elsewhere; "chain" never takes it.
TEST(DecodeStepPath, ChainByDefaultPersistentWhereItGivesTheOpsBits) {
  const auto path = [](DecodeStepChoice c, bool applies, bool invariant, int64_t rows,
                       int64_t groups, int64_t width) {
    return decode_step_path(c, applies, invariant, rows, groups, width, 132);
  };
  for (DecodeStepChoice c : {DecodeStepChoice::kDefault, DecodeStepChoice::kChain}) {
    EXPECT_EQ(path(c, true, false, 1, 1, 16), DecodeStepPath::kChain);
    EXPECT_EQ(path(c, true, false, 16, 1, 16), DecodeStepPath::kChain);
    EXPECT_EQ(path(c, false, false, 1, 1, 16), DecodeStepPath::kChain);
    EXPECT_EQ(path(c, true, true, 1, 1, 16), DecodeStepPath::kChain);
  }
  const DecodeStepChoice forced = DecodeStepChoice::kPersistent;
  // TP4 (one KV head group), top-16: batch 1-16 at one row each fit 264 CTAs; 17 do not.
  EXPECT_EQ(path(forced, true, false, 1, 1, 16), DecodeStepPath::kPersistent);
  EXPECT_EQ(path(forced, true, false, 16, 1, 16), DecodeStepPath::kPersistent);
  EXPECT_EQ(path(forced, true, false, 17, 1, 16), DecodeStepPath::kNotSupported);
  // Two head groups halve the batch it takes.
  EXPECT_EQ(path(forced, true, false, 8, 2, 16), DecodeStepPath::kPersistent);
  EXPECT_EQ(path(forced, true, false, 9, 2, 16), DecodeStepPath::kNotSupported);
  // Widths the one-block attention plan does not take, no rows.
  EXPECT_EQ(path(forced, true, false, 1, 1, 1), DecodeStepPath::kNotSupported);
  EXPECT_EQ(path(forced, true, false, 1, 1, 128), DecodeStepPath::kNotSupported);
  EXPECT_EQ(path(forced, true, false, 0, 1, 16), DecodeStepPath::kNotSupported);
  // Not applicable, or batch invariant.
  EXPECT_EQ(path(forced, false, false, 1, 1, 16), DecodeStepPath::kNotSupported);
  EXPECT_EQ(path(forced, true, true, 1, 1, 16), DecodeStepPath::kNotSupported);
}

// Dense attention's split-KV kernels: splits fill kDenseTargetCtas CTAs where the table's keys
// allow (8 tiles of 32 keys a split at least), at most kDenseMaxSplits; one split for batch-
// invariant calls and for calls that already fill the target.
TEST(DenseSplitCount, FillsTheTargetWhereTheKeysAllow) {
  const auto tiles = [](int64_t keys) { return (keys + 31) / 32; };
  // The engine's decode rows: 64 rows at a 129-column table (16512 keys): 10 splits, 640 CTAs.
  EXPECT_EQ(dense_split_count(false, 64, 1, tiles(129 * 128)), 10);
  // One row at 128K: the cap, 512 splits of 8 tiles.
  EXPECT_EQ(dense_split_count(false, 1, 1, tiles(1025 * 128)), 512);
  // A short table bounds the splits by its keys.
  EXPECT_EQ(dense_split_count(false, 1, 1, tiles(3 * 128)), 1);
  EXPECT_EQ(dense_split_count(false, 1, 1, tiles(40 * 128)), 20);
  // The target already met, no rows, batch invariant.
  EXPECT_EQ(dense_split_count(false, 640, 1, tiles(1025 * 128)), 1);
  EXPECT_EQ(dense_split_count(false, 160, 4, tiles(1025 * 128)), 1);
  EXPECT_EQ(dense_split_count(false, 0, 1, tiles(1025 * 128)), 1);
  EXPECT_EQ(dense_split_count(true, 1, 1, tiles(1025 * 128)), 1);
  // Shapes only: never more CTAs than the target needs, splits never grow with the rows.
  for (int64_t heads : {1, 2, 8}) {
    int prev = dense_split_count(false, 1, heads, tiles(4096 * 128));
    for (int64_t rows = 1; rows <= 700; ++rows) {
      const int n = dense_split_count(false, rows, heads, tiles(4096 * 128));
      EXPECT_GE(n, 1);
      EXPECT_LE(n, kDenseMaxSplits);
      EXPECT_LE(n, prev) << rows << " rows";
      if (n > 1) {
        EXPECT_LT((n - 1) * rows * heads, kDenseTargetCtas) << rows << " rows";
      }
      prev = n;
    }
  }
}

}  // namespace
}  // namespace detail
}  // namespace msa
