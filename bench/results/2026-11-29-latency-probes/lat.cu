// Latency probes after an L2 flush: parameter-bank misses, dependent DRAM trips, TLB effects.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <vector>
__device__ unsigned long long g_t[64];
__device__ __forceinline__ unsigned long long gt() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void flush_k(const int4* p, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int4 v = p[i];
    acc ^= v.x ^ v.w;
  }
  if (acc == 0x12345) *sink = acc;
}
struct Fat {
  long long f[48];
  int* out;
};
__global__ void thin_k(int* out, int v) {
  if (threadIdx.x == 0) {
    g_t[0] = gt();
    out[blockIdx.x] = v;
    g_t[1] = gt();
  }
}
__global__ void fat_k(const Fat p) {
  if (threadIdx.x == 0) {
    unsigned long long t0 = gt();
    long long s = 0;
#pragma unroll
    for (int i = 0; i < 48; ++i) s += p.f[i] * (i + 1);
    p.out[blockIdx.x] = (int)s;
    unsigned long long t1 = gt();
    if (blockIdx.x == 0) {
      g_t[0] = t0;
      g_t[1] = t1;
    }
  }
}
// chase: n dependent loads, each in a different region separated by `stride` bytes
__global__ void chase_k(const int* base, int n, long long stride_ints, int* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    int idx = 0;
    g_t[0] = gt();
    for (int i = 0; i < n; ++i) {
      idx = __ldcg(base + (long long)i * stride_ints + idx);
      g_t[i + 1] = gt();
    }
    *out = idx;
  }
}
int main() {
  size_t fb = 256u << 20;
  int4* fbuf;
  cudaMalloc(&fbuf, fb);
  cudaMemset(fbuf, 1, fb);
  int* sink;
  cudaMalloc(&sink, 4);
  int* out;
  cudaMalloc(&out, 4096);
  size_t big = 2ull << 30;
  int* buf;
  cudaMalloc(&buf, big);
  cudaMemset(buf, 0, big);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto med = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  Fat fat;
  for (int i = 0; i < 48; ++i) fat.f[i] = i;
  fat.out = out;
  for (int mode = 0; mode < 2; ++mode) {
    std::vector<double> ev, in;
    for (int it = 0; it < 21; ++it) {
      flush_k<<<528, 512>>>(fbuf, fb / 16, sink);
      cudaEventRecord(e0);
      if (mode == 0)
        thin_k<<<132, 128>>>(out, it);
      else
        fat_k<<<132, 128>>>(fat);
      cudaEventRecord(e1);
      cudaDeviceSynchronize();
      float a;
      cudaEventElapsedTime(&a, e0, e1);
      unsigned long long t[2];
      cudaMemcpyFromSymbol(t, g_t, 16);
      ev.push_back(a * 1e3);
      in.push_back((double)(t[1] - t[0]));
    }
    printf("%s params: event %.2f us, in-kernel param+store %.0f ns\n",
           mode ? "fat(48 x i64)" : "thin", med(ev), med(in));
  }
  // warm (no flush) fat
  {
    std::vector<double> in;
    for (int it = 0; it < 21; ++it) {
      fat_k<<<132, 128>>>(fat);
      cudaDeviceSynchronize();
      unsigned long long t[2];
      cudaMemcpyFromSymbol(t, g_t, 16);
      in.push_back((double)(t[1] - t[0]));
    }
    printf("fat params warm: in-kernel %.0f ns\n", med(in));
  }
  struct {
    const char* name;
    long long stride;
    bool flush;
  } cs[] = {{"same 64KB, flushed", 16 * 1024 / 4, true},
            {"stride 2MB, flushed", 2 << 20 >> 2, true},
            {"stride 64MB, flushed", 64 << 20 >> 2, true},
            {"stride 2MB, warm", 2 << 20 >> 2, false}};
  for (auto& c : cs) {
    std::vector<double> per[9];
    for (int it = 0; it < 21; ++it) {
      if (c.flush) flush_k<<<528, 512>>>(fbuf, fb / 16, sink);
      chase_k<<<1, 32>>>(buf, 8, c.stride, out);
      cudaDeviceSynchronize();
      unsigned long long t[9];
      cudaMemcpyFromSymbol(t, g_t, 72);
      for (int i = 0; i < 8; ++i) per[i].push_back((double)(t[i + 1] - t[i]));
    }
    printf("chase %-22s:", c.name);
    for (int i = 0; i < 8; ++i) printf(" %5.0f", med(per[i]));
    printf(" ns\n");
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
