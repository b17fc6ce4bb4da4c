// Prints how many clusters of each size the sparse attention kernel can keep resident.
#include <cstdio>
#include "cuda/sparse_attention_kernels.cuh"
int main() {
  auto k = msa::cuda::sparse_attention_kernel<__nv_bfloat16, 128>;
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int cs : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, cs);
    cfg.blockDim = dim3(128);
    cudaLaunchAttribute a = {};
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = 1;
    a.val.clusterDim.y = 1;
    a.val.clusterDim.z = cs;
    cfg.attrs = &a;
    cfg.numAttrs = 1;
    int n = -1;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
    printf("cluster %2d: max active clusters %d (%s)\n", cs, n, cudaGetErrorString(e));
  }
}
