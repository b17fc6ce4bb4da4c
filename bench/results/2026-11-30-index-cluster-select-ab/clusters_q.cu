// Resident clusters of a 256-thread kernel held to 2 CTAs per SM (by shared memory), per size.
#include <cuda_runtime.h>
#include <cstdio>
__global__ void k(int* p) {
  extern __shared__ int s[];
  s[threadIdx.x] = 1;
  if (p) p[0] = s[0];
}
int main() {
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  printf("resident clusters (2 CTAs/SM):");
  for (int size = 1; size <= 16; ++size) {
    cudaLaunchAttribute a = {};
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = 1;
    a.val.clusterDim.y = size;
    a.val.clusterDim.z = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = dim3(1, size, 1);
    c.blockDim = dim3(256);
    c.dynamicSmemBytes = 100 * 1024;
    c.attrs = &a;
    c.numAttrs = 1;
    int n = -1;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &c);
    printf(" %d:%d%s", size, n, e ? "(err)" : "");
  }
  printf("\n");
}
