// The index launch plans of op_ab's shapes on the H200 under one launch_policy.h: compiled with
// -I pointing at a folder holding that header as core/launch_policy.h (g++ -std=c++17).
#include <cstdio>
#include "core/launch_policy.h"
using namespace msa::detail;
int main() {
  IndexClusterLimits c;
  c.max_size = 16;
  const long r[] = {0, 264, 132, 79, 62, 47, 39, 32, 30, 23, 21, 16, 16, 14, 14, 14, 14};
  for (int i = 0; i <= 16; ++i) c.resident[i] = r[i];
  for (int ctx : {8192, 32768, 131072, 524288})
    for (int b : {1, 4, 16, 64}) {
      IndexLaunchPlan p = plan_index_launch(b, ctx / 128, 132, 2, true, c);
      std::printf("%6d x %2d: bpc %2d chunks %4ld cluster %d early %d\n", ctx, b, p.blocks_per_cta,
                  (long)p.chunks, p.cluster_select, p.early_select);
    }
}
