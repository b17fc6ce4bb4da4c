// Device helpers shared by the CUDA kernels: element loads/stores for every storage dtype,
// the device error flag, and launch error reporting.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <string>

#include "msa/types.h"

namespace msa {
namespace cuda {

// Loads element i of a 16/32/8-bit float buffer as float.
__device__ __forceinline__ float load_as_float(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case DType::kE4M3: {
      __nv_fp8_e4m3 v;
      v.__x = static_cast<const __nv_fp8_storage_t*>(p)[i];
      return static_cast<float>(v);
    }
    default:
      return static_cast<const float*>(p)[i];
  }
}

// One stored element as float; an e4m3 element is passed as its storage byte (uint8_t).
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(uint8_t v) {
  __nv_fp8_e4m3 f;
  f.__x = v;
  return static_cast<float>(f);
}

// x / d for 0 <= x < 2^32 and d >= 1: a shift where d is a power of two (block sizes, query
// lengths and head-chunk counts usually are; the test is uniform where d is), else a 32-bit
// division. The attention kernel's divisions sit on its path to its next loads, and a 32-bit
// division is ~20 dependent instructions around a MUFU.RCP (a 64-bit one adds a branch to a
// library call): bench/EXPERIMENTS.md: 2026-12-01-attn-divisions. The index scorers keep plain
// divisions, whose register use their instances at the 128-register bound are tuned to.
__device__ __forceinline__ uint32_t div_u32(uint32_t x, uint32_t d) {
  return (d & (d - 1)) == 0 ? x >> (__ffs(static_cast<int>(d)) - 1) : x / d;
}

// Kernel parameters: a kernel reads its parameter struct through the constant cache, which is
// cold at its start. A uniform read (ULDC, or a c[] operand) that misses stalls the warp until
// its 64-byte line arrives, and a warp's first misses come one after another (Nsight Compute's
// `imc` stalls in the decode kernels, bench/EXPERIMENTS.md: 2026-12-01-param-lines-insert-grid).
// Every kernel reads the line at offset
// 0x200 (it holds the global memory descriptor), and a struct starts at 0x210, so its first 48
// bytes share that line. Parameter structs therefore list their fields in order of first use, so
// that the fields the prologue needs before its first loads share as few lines as possible; RowMap
// is one line.
//
// Issuing loads: a load whose value is used in the branch that issued it (load_as_float in a
// loop converts each element inside its dtype case; `cond ? p[i] : 0` does the same) makes the
// thread wait for it before it issues the next, one memory round trip per element
// (bench/EXPERIMENTS.md: 2026-11-29-latency-probes). Kernels therefore
// take the dtype branch once, issue all loads unconditionally (indices clamped into the tensor,
// unused values dropped after they arrive) and convert afterwards, as ld_raw_elems and
// raw_elems_to_floats do.
// Loads issued where they are written, as raw bits. A plain load can still cost its own round
// trip: the compiler converts its value right after it when a branch follows (an i32 -> i64 sign
// extension, a bf16 unpack, a dtype switch), and the thread waits there before it reaches the
// next load (seen in Nsight Compute source counters, bench/EXPERIMENTS.md:
// 2026-12-01-prologue-loads). An asm volatile load stays in program order with the others, and its
// value is not touched until the caller converts it, after its other independent loads. ptxas may
// still sink a load into the conditional block that alone uses its value (st_shared_b16_if).
// Coherent ld.global: the buffers may be written by an earlier kernel of the stream; not ordered
// against this thread's own stores (the callers load before they store).
__device__ __forceinline__ uint32_t ld_raw_u8(const void* p) {
  uint32_t v;
  asm volatile("ld.global.u8 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_raw_u16(const void* p) {
  uint32_t v;
  asm volatile("ld.global.u16 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_raw_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_raw_v2(const void* p) {
  uint2 v;
  asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ld_raw_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes from global to shared memory, asynchronously (cp.async, in the thread's current commit
// group); with `keep` false the destination is zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* global_src) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src)
               : "memory");
}
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* global_src, bool keep) {
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(keep ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending of the thread's commit groups are in flight; the thread's own
// copies of the others are then visible to it.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// *p = v (p in shared memory) where `pred`, as one predicated store instead of a branch: a store
// behind a branch lets ptxas sink the loads that feed it into that branch, one round trip each.
__device__ __forceinline__ void st_shared_b16_if(bool pred, void* p, uint16_t v) {
  asm volatile(
      "{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %0, 0;\n\t@q st.shared.b16 [%1], %2;\n\t}" ::"r"(
          static_cast<uint32_t>(pred)),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))), "h"(v)
      : "memory");
}

// The same for a 64-bit value at a shared-space address (__cvta_generic_to_shared).
__device__ __forceinline__ void st_shared_u64_if(bool pred, uint32_t addr, uint64_t v) {
  asm volatile(
      "{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %0, 0;\n\t@q st.shared.u64 [%1], %2;\n\t}" ::"r"(
          static_cast<uint32_t>(pred)),
      "r"(addr), "l"(v)
      : "memory");
}

// Element i of an i32 or i64 index tensor as raw words (one predicated load, no branch);
// index_value converts it.
struct RawIndex {
  uint32_t lo, hi;
};
__device__ __forceinline__ RawIndex ld_raw_index(const void* p, bool is_i64, int64_t i) {
  const char* a = static_cast<const char*>(p) + i * (is_i64 ? 8 : 4);
  RawIndex r;
  asm volatile(
      "{\n\t.reg .pred w;\n\tsetp.ne.u32 w, %2, 0;\n\t"
      "@w ld.global.v2.u32 {%0, %1}, [%3];\n\t@!w ld.global.u32 %0, [%3];\n\t"
      "@!w mov.u32 %1, 0;\n\t}"
      : "=r"(r.lo), "=r"(r.hi)
      : "r"(static_cast<uint32_t>(is_i64)), "l"(a));
  return r;
}
__device__ __forceinline__ int64_t index_value(RawIndex r, bool is_i64) {
  return is_i64 ? static_cast<int64_t>((static_cast<uint64_t>(r.hi) << 32) | r.lo)
                : static_cast<int64_t>(static_cast<int32_t>(r.lo));
}

// Elements idx[0..N) of a bf16/f16/e4m3/f32 buffer as raw bits, all N loads in one round trip,
// and their conversion to floats: two parts, so that other loads can be issued between them.
template <int N>
__device__ __forceinline__ void ld_raw_elems(const void* p, DType t, const int64_t (&idx)[N],
                                             uint32_t (&raw)[N]) {
  const char* b = static_cast<const char*>(p);
  switch (t) {
    case DType::kBF16:
    case DType::kF16:
#pragma unroll
      for (int i = 0; i < N; ++i) raw[i] = ld_raw_u16(b + 2 * idx[i]);
      break;
    case DType::kE4M3:
#pragma unroll
      for (int i = 0; i < N; ++i) raw[i] = ld_raw_u8(b + idx[i]);
      break;
    default:
#pragma unroll
      for (int i = 0; i < N; ++i) raw[i] = ld_raw_u32(b + 4 * idx[i]);
      break;
  }
}
template <int N>
__device__ __forceinline__ void raw_elems_to_floats(DType t, const uint32_t (&raw)[N],
                                                    float (&out)[N]) {
  switch (t) {
    case DType::kBF16:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = __uint_as_float(raw[i] << 16);
      break;
    case DType::kF16:
#pragma unroll
      for (int i = 0; i < N; ++i) {
        out[i] = __half2float(__ushort_as_half(static_cast<unsigned short>(raw[i])));
      }
      break;
    case DType::kE4M3:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = to_float(static_cast<uint8_t>(raw[i]));
      break;
    default:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = __uint_as_float(raw[i]);
      break;
  }
}

// Stores x rounded to nearest even; e4m3 saturates to +-448 (NaN kept).
__device__ __forceinline__ void store_from_float(void* p, DType t, int64_t i, float x) {
  switch (t) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x);
      break;
    case DType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(x);
      break;
    case DType::kE4M3:
      static_cast<__nv_fp8_storage_t*>(p)[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
      break;
    default:
      static_cast<float*>(p)[i] = x;
      break;
  }
}

// ORs `bits` into the caller's error flag word (no-op when the caller passed none).
__device__ __forceinline__ void raise_error(int32_t* flags, int32_t bits) {
  if (flags != nullptr) atomicOr(flags, bits);
}

// Status for the last launch on this thread ("<kernel>: <cuda error>"), Ok when none.
inline Status launch_status(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError, std::string(kernel) + ": " + cudaGetErrorString(e));
}

// Launches `kernel` and returns the launch status named after it.
template <typename... KArgs, typename... Args>
Status launch_kernel(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                     cudaStream_t stream, const Args&... args) {
  kernel<<<grid, block, smem, stream>>>(args...);
  return launch_status(name);
}

// Programmatic dependent launch (sm_90). A kernel launched with launch_kernel_dependent may start
// once every CTA of the kernel before it in the stream has run allow_dependent_launch (or
// exited), so its launch and its first loads overlap that kernel's tail. It must run
// wait_for_prior_grid before it reads anything the kernel before it writes: that returns once
// the prior grid has completed and its memory is visible. Used only between the kernels of one
// op, where the earlier kernel itself was launched in stream order, so everything older is done.
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void wait_for_prior_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// cudaLaunchKernelEx with `config`; a failed launch as a Status naming the kernel.
template <typename... KArgs, typename... Args>
Status launch_kernel_ex(const char* name, void (*kernel)(KArgs...),
                        const cudaLaunchConfig_t& config, const Args&... args) {
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, args...);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(StatusCode::kCudaError, std::string(name) + ": " + cudaGetErrorString(e));
  }
  return launch_status(name);
}

template <typename... KArgs, typename... Args>
Status launch_kernel_dependent(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                               size_t smem, cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return launch_kernel_ex(name, kernel, config, args...);
}

// A launch configuration in thread-block clusters of `cluster` CTAs (for cudaLaunchKernelEx and
// cudaOccupancyMaxActiveClusters); `attribute` receives the cluster dimension the configuration
// points to, so it must outlive the configuration's use.
inline cudaLaunchConfig_t cluster_launch_config(dim3 grid, dim3 block, size_t smem,
                                                cudaStream_t stream, dim3 cluster,
                                                cudaLaunchAttribute* attribute) {
  *attribute = {};
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = cluster.x;
  attribute->val.clusterDim.y = cluster.y;
  attribute->val.clusterDim.z = cluster.z;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

// Launches `kernel` in thread-block clusters of `cluster` CTAs (each grid dimension a multiple of
// the cluster's). Clusters above the portable 8 CTAs need the kernel's non-portable attribute,
// set here; whether the device can schedule them is the caller's question
// (cudaOccupancyMaxActiveClusters).
template <typename... KArgs, typename... Args>
Status launch_kernel_clustered(const char* name, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                               size_t smem, cudaStream_t stream, dim3 cluster,
                               const Args&... args) {
  if (cluster.x * cluster.y * cluster.z > 8) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status(StatusCode::kCudaError,
                    std::string(name) + ": clusters above 8 CTAs: " + cudaGetErrorString(e));
    }
  }
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config =
      cluster_launch_config(grid, block, smem, stream, cluster, &attribute);
  return launch_kernel_ex(name, kernel, config, args...);
}

// Clusters of `cluster` CTAs of `kernel` (blocks of `block` threads, static shared memory only)
// that the current device can keep resident at once (cudaOccupancyMaxActiveClusters; a cluster
// stays within one GPC), or 0 when it cannot run such clusters at all. Sizes above the portable
// 8 CTAs set the kernel's non-portable attribute first.
template <typename... KArgs>
int resident_clusters(void (*kernel)(KArgs...), dim3 block, dim3 cluster) {
  if (cluster.x * cluster.y * cluster.z > 8 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config =
      cluster_launch_config(cluster, block, 0, nullptr, cluster, &attribute);
  int resident = 0;
  if (cudaOccupancyMaxActiveClusters(&resident, kernel, &config) != cudaSuccess || resident < 0) {
    (void)cudaGetLastError();  // a device without clusters answers with an error
    return 0;
  }
  return resident;
}

// Launch information of kVariants kernel variants per device (occupancy, resident clusters),
// which depends only on a kernel's resources and the device: queried once by the caller's
// `query`, then read without a lock (a call costs one cudaGetDevice). Meant as a function-local
// static.
template <typename T, int kVariants>
class PerDeviceCache {
 public:
  template <typename Query>
  T get(int variant, Query&& query) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kDevices || variant < 0 ||
        variant >= kVariants) {
      (void)cudaGetLastError();
      return query();
    }
    Slot& slot = slots_[dev][variant];
    if (!slot.ready.load(std::memory_order_acquire)) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!slot.ready.load(std::memory_order_relaxed)) {
        slot.value = query();
        slot.ready.store(true, std::memory_order_release);
      }
    }
    return slot.value;
  }

 private:
  static constexpr int kDevices = 64;
  struct Slot {
    std::atomic<bool> ready{false};
    T value{};
  };
  Slot slots_[kDevices][kVariants];
  std::mutex mutex_;
};

// Multiprocessors of the current device (the launch policy's unit of parallelism).
inline int device_sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();
    return 132;  // an H100/H200's; only reached when the runtime cannot answer, and then no
                 // launch works
  }
  return n;
}

// The cudaStream_t of an op call.
inline cudaStream_t stream_of(const Stream& s) { return static_cast<cudaStream_t>(s.cuda_stream); }

// Loads element i of an i32 or i64 index tensor (positions, slots, lengths) as int64.
__device__ __forceinline__ int64_t load_index(const void* p, bool is_i64, int64_t i) {
  return is_i64 ? static_cast<const int64_t*>(p)[i]
                : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

// True when `p` is aligned to `bytes` (host-side vector-access eligibility checks).
inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Grid size for `items` work items of `per_block` each; callers skip the launch when 0.
inline unsigned int blocks_for(int64_t items, int64_t per_block) {
  return static_cast<unsigned int>((items + per_block - 1) / per_block);
}

}  // namespace cuda
}  // namespace msa
