// Probe: how long N CTAs take to pull B bytes each from DRAM (cold L2), by 16-byte loads all in
// flight (LDG) or by bulk copies into shared memory (cp.async.bulk + mbarrier).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

__device__ __forceinline__ uint64_t gt() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

template <int kPer>  // 16-byte loads per thread
__global__ void __launch_bounds__(1024)
    ldg_kernel(const uint4* base, int64_t stride_elems, uint4* sink, uint64_t* st) {
  const uint64_t t0 = gt();
  const uint4* p = base + blockIdx.x * stride_elems;
  uint4 r[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) r[i] = __ldg(p + threadIdx.x + i * blockDim.x);
  uint32_t x = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) x ^= r[i].x ^ r[i].y ^ r[i].z ^ r[i].w;
  __syncthreads();
  const uint64_t t1 = gt();
  if (x == 0x12345678u) sink[0] = r[0];
  if (threadIdx.x == 0) {
    st[2 * blockIdx.x] = t0;
    st[2 * blockIdx.x + 1] = t1;
  }
}

__global__ void __launch_bounds__(128)
    bulk_kernel(const char* base, int64_t stride_bytes, int bytes, int chunk, uint4* sink,
                uint64_t* st) {
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t bar;
  const uint64_t t0 = gt();
  const char* p = base + blockIdx.x * stride_bytes;
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;");
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(bytes));
  }
  __syncthreads();
  {
    for (int o = threadIdx.x * chunk; o < bytes; o += chunk * blockDim.x) {
      const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(smem + o));
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];" ::"r"(d),
          "l"(p + o), "r"(chunk), "r"(b)
          : "memory");
    }
  }
  __syncthreads();
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred q; mbarrier.try_wait.parity.shared.b64 q, [%1], 0; selp.u32 %0, 1, 0, q; }"
        : "=r"(done)
        : "r"(b));
  }
  const uint4 v = reinterpret_cast<const uint4*>(smem)[threadIdx.x];
  __syncthreads();
  const uint64_t t1 = gt();
  if (v.x == 0x12345678u) sink[0] = v;
  if (threadIdx.x == 0) {
    st[2 * blockIdx.x] = t0;
    st[2 * blockIdx.x + 1] = t1;
  }
}

__global__ void flush_kernel(uint4* f, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    f[i] = make_uint4(i, 0, 0, 0);
}

template <typename K, typename... A>
void launch(K kernel, int ctas, int threads, size_t smem, int cluster, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = cluster;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = cluster > 1 ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (e != cudaSuccess) printf("launch: %s\n", cudaGetErrorString(e));
}

int main() {
  const int64_t pool = 1ll << 30, flushb = 256ll << 20;
  char* buf;
  uint4* fl;
  uint4* sink;
  uint64_t* st;
  cudaMalloc(&buf, pool);
  cudaMalloc(&fl, flushb);
  cudaMalloc(&sink, 64);
  cudaMalloc(&st, 2 * 1024 * 8);
  cudaMemset(buf, 1, pool);
  cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(ldg_kernel<4>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(ldg_kernel<8>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(ldg_kernel<32>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(ldg_kernel<16>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int64_t stride = 1ll << 20;
  auto run = [&](const char* mode, int ctas, int cluster, int threads, int chunk) {
    const int kb = 64;
    std::vector<float> ev;
    std::vector<double> med, mx;
    for (int it = 0; it < 21; ++it) {
      flush_kernel<<<264, 1024>>>(fl, flushb / 16);
      cudaEventRecord(e0);
      if (mode[0] == 'l') {
        if (threads == 128)
          launch(ldg_kernel<32>, ctas, threads, 0, cluster, (const uint4*)buf, stride / 16, sink,
                 st);
        else if (threads == 512)
          launch(ldg_kernel<8>, ctas, threads, 0, cluster, (const uint4*)buf, stride / 16, sink,
                 st);
        else
          launch(ldg_kernel<4>, ctas, threads, 0, cluster, (const uint4*)buf, stride / 16, sink,
                 st);
      } else {
        launch(bulk_kernel, ctas, threads, kb * 1024, cluster, (const char*)buf, stride, kb * 1024,
               chunk, sink, st);
      }
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      ev.push_back(ms * 1000);
      std::vector<uint64_t> h(2 * ctas);
      cudaMemcpy(h.data(), st, 16 * ctas, cudaMemcpyDeviceToHost);
      std::vector<double> d;
      for (int c = 0; c < ctas; ++c) d.push_back((h[2 * c + 1] - h[2 * c]) / 1000.0);
      std::sort(d.begin(), d.end());
      med.push_back(d[d.size() / 2]);
      mx.push_back(d.back());
    }
    auto m = [](auto v) {
      std::sort(v.begin(), v.end());
      return (double)v[v.size() / 2];
    };
    printf(
        "%-5s ctas %3d cluster %2d thr %4d chunk %5d | event %6.2f cta_med %6.2f cta_max %6.2f\n",
        mode, ctas, cluster, threads, chunk, m(ev), m(med), m(mx));
  };
  for (int cl : {1, 16}) {
    run("ldg", 16, cl, 128, 0);
    run("ldg", 16, cl, 512, 0);
    run("bulk", 16, cl, 128, 4096);
    run("bulk", 16, cl, 128, 8192);
  }
  for (int cl : {1, 8, 16}) {
    run("ldg", 64, cl, 128, 0);
    run("bulk", 64, cl, 128, 8192);
  }
  printf("%s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}
