// Uses the installed public headers and library: the TP4 rank shape of MiniMax-M3.
#include <cstdio>

#include "msa/msa.h"

int main() {
  msa::RankShape shape;
  const msa::Status status = msa::rank_shape(msa::ModelConfig::minimax_m3(), 4, &shape);
  std::printf("msa %s: %s, TP4 rank q=%d kv=%d row=%d\n", msa::version_string(),
              status.to_string().c_str(), shape.num_q_heads, shape.num_kv_heads,
              shape.fused_row_width);
  return status.ok() && shape.fused_row_width == 2560 ? 0 : 1;
}
