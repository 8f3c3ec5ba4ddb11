#pragma once
// What the project's CUDA kernels share (oracles/gpu_attention.cu, oracles/gpu_error_terms.cu):
// device buffers, the Sq x Skv scratch kept between calls, the mask's 64 x 64 tile map, the score
// bias and the one tiled matrix-product kernel every product goes through. Included by .cu files
// only; its definitions have internal linkage (one copy per kernel file).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "oracles/device_mirror.h"
#include "oracles/exact_transfer.h"
#include "oracles/gpu_attention.h"

namespace attnfuzz::gpu {
namespace {

constexpr int kTile = 64;         // output tile edge, and the mask's tile edge
constexpr int kChunk = 16;        // reduction terms staged per step
constexpr int kThreads = 256;     // 16 x 16 threads, 4 x 4 outputs each
constexpr int kScratchSlots = 8;  // Sq x Skv buffers a computation may hold at once

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
#define AF_CUDA(x) check((x), #x)

// Device buffers come from the device's stream-ordered pool, on the legacy default stream that
// every kernel and copy here uses: a call allocates a dozen buffers or more, and cudaMalloc and
// cudaFree (which waits for the device) each time cost more than small cases' kernels. The pool
// keeps up to kKeptDeviceBytes of freed memory for the next call instead of returning it.
constexpr uint64_t kKeptDeviceBytes = uint64_t{1} << 30;
void keep_freed_device_memory() {
  static const bool kept = [] {
    int device = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&device) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      uint64_t keep = kKeptDeviceBytes;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    return true;
  }();
  (void)kept;
}

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    keep_freed_device_memory();
    if (n_) AF_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&p_), n_ * sizeof(T), cudaStreamLegacy));
  }
  ~DeviceBuffer() {
    if (p_) cudaFreeAsync(p_, cudaStreamLegacy);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const T* h) {
    if (n_) AF_CUDA(cudaMemcpy(p_, h, n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(T* h) const {
    if (n_) AF_CUDA(cudaMemcpy(h, p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// The Sq x Skv scratch buffers (scores, dP), kept from call to call: allocating and freeing
// gigabytes costs milliseconds each time. Grows to the largest request; at most the memory
// budget of chunk_heads per buffer.
template <class T>
T* scratch(int slot, size_t n) {
  thread_local DeviceBuffer<T> buffers[kScratchSlots];
  if (buffers[slot].size() < n) {
    buffers[slot] = DeviceBuffer<T>();  // free the old one first
    buffers[slot] = DeviceBuffer<T>(n);
  }
  return buffers[slot].get();
}

// The float64 products: one fused multiply-add per term.
struct FusedMac {
  __device__ static __forceinline__ double mac(double acc, double a, double b) { return fma(a, b, acc); }
};

// ---- the mask: dense planes, and per 64 x 64 tile whether it is empty, partial or full ----
enum : uint8_t { kTileEmpty = 0, kTilePartial = 1, kTileFull = 2 };

struct MaskView {
  const uint8_t* dense;  // [planes][Sq][Skv]
  const uint8_t* tiles;  // [planes][tiles_q][tiles_kv]
  bool one_plane;
  int64_t sq, skv, tiles_q, tiles_kv;
  __device__ bool visible(int64_t zq, int64_t i, int64_t j) const { return dense[((one_plane ? 0 : zq) * sq + i) * skv + j] != 0; }
  __device__ bool tile_empty(int64_t zq, int64_t ti, int64_t tj) const {
    return tiles[((one_plane ? 0 : zq) * tiles_q + ti) * tiles_kv + tj] == kTileEmpty;
  }
};

__global__ void classify_tiles(MaskView m) {
  const int64_t tj = blockIdx.x, ti = blockIdx.y, plane = blockIdx.z;
  int visible = 0, total = 0;
  for (int e = threadIdx.x; e < kTile * kTile; e += blockDim.x) {
    const int64_t i = ti * kTile + e / kTile, j = tj * kTile + e % kTile;
    if (i < m.sq && j < m.skv) {
      ++total;
      visible += m.dense[(plane * m.sq + i) * m.skv + j] != 0;
    }
  }
  const int v = __syncthreads_count(visible > 0);
  const int full = __syncthreads_count(visible == total);
  if (threadIdx.x == 0)
    const_cast<uint8_t*>(m.tiles)[(plane * m.tiles_q + ti) * m.tiles_kv + tj] =
        v == 0 ? kTileEmpty : (full == static_cast<int>(blockDim.x) ? kTileFull : kTilePartial);
}

// The dense mask on the device (one plane when every (b, h) shares it; the mirror's copy,
// oracles/device_mirror.h) and its tile map.
struct DeviceMask {
  SharedCopy dense;
  DeviceBuffer<uint8_t> tiles;
  MaskView v;
  explicit DeviceMask(const HostAttention& a) {
    const int64_t planes = a.mask_one_plane ? 1 : a.batch * a.heads_q;
    const int64_t tiles_q = (a.seq_q + kTile - 1) / kTile, tiles_kv = (a.seq_kv + kTile - 1) / kTile;
    dense = device_copy(a.mask, static_cast<size_t>(planes * a.seq_q * a.seq_kv));
    tiles = DeviceBuffer<uint8_t>(static_cast<size_t>(planes * tiles_q * tiles_kv));
    v = {dense->bytes_data(), tiles.get(), a.mask_one_plane, a.seq_q, a.seq_kv, tiles_q, tiles_kv};
    classify_tiles<<<dim3(static_cast<unsigned>(tiles_kv), static_cast<unsigned>(tiles_q), static_cast<unsigned>(planes)), kThreads>>>(v);
    AF_CUDA(cudaGetLastError());
  }
  MaskView view() const { return v; }
};

// ---- the score bias: float64 in its broadcast shape [E0][E1][E2][E3] (HostAttention::bias) ----
struct BiasView {
  const double* values;  // null: no bias
  int64_t heads_q;       // the problem's Hq: query head zq is (b, h) = (zq / Hq, zq % Hq)
  int64_t extent[4];
  __device__ bool on() const { return values != nullptr; }
  // bias[b][h][i][j] of query head zq, broadcast over the extents of 1.
  __device__ double at(int64_t zq, int64_t i, int64_t j) const {
    const int64_t b = extent[0] > 1 ? zq / heads_q : 0, h = extent[1] > 1 ? zq % heads_q : 0;
    return values[((b * extent[1] + h) * extent[2] + (extent[2] > 1 ? i : 0)) * extent[3] + (extent[3] > 1 ? j : 0)];
  }
};

// The bias on the device, as the host holds it (float64: exact for every case dtype; the
// mirror's copy).
struct DeviceBias {
  SharedCopy values;
  BiasView v{};
  explicit DeviceBias(const HostAttention& a) {
    v.heads_q = a.heads_q;
    for (int d = 0; d < 4; ++d) v.extent[d] = a.bias_extent[d];
    if (!a.bias) return;
    const int64_t full[4] = {a.batch, a.heads_q, a.seq_q, a.seq_kv};
    for (int d = 0; d < 4; ++d)
      if (a.bias_extent[d] != 1 && a.bias_extent[d] != full[d])
        throw std::invalid_argument("bias extent " + std::to_string(a.bias_extent[d]) + " in dimension " + std::to_string(d) +
                                    " is neither 1 nor " + std::to_string(full[d]));
    values = device_copy(a.bias, static_cast<size_t>(a.bias_extent[0] * a.bias_extent[1] * a.bias_extent[2] * a.bias_extent[3]));
    v.values = values->doubles();
  }
  BiasView view() const { return v; }
};

// Indices inside one chunk of heads: zq is a query head (b * Hq + h) counted from the chunk's
// first, zk = zq / group its kv head; `first_q` turns them into whole-problem indices.
struct Heads {
  int64_t first_q, group;
};

// ---- the tiled product ----
// G describes one product: C[z][r][c] = fold over o < outer of sum_k A(z, o, r, k) B(z, o, k, c),
// with A and B already rounded as operands; a_kcontig / b_ccontig say which index of each is
// contiguous in memory (for coalesced staging).
template <class T, class Mac, class G>
__global__ void __launch_bounds__(kThreads) tile_gemm(G g, bool reversed) {
  __shared__ T as[kChunk][kTile + 1];
  __shared__ T bs[kChunk][kTile + 1];
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const int z = blockIdx.z;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t steps = (g.depth + kChunk - 1) / kChunk;
  T total[4][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) total[a][b] = T(0);
  for (int o = 0; o < g.outer; ++o) {
    if (g.skip_tile(z, o, r0, c0)) continue;
    T acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) acc[a][b] = T(0);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k0 = (reversed ? steps - 1 - s : s) * kChunk;
      if (g.skip_chunk(z, o, r0, c0, k0)) continue;
#pragma unroll
      for (int rep = 0; rep < 4; ++rep) {
        const int kk = G::a_kcontig ? t % kChunk : t / kTile + 4 * rep;
        const int r = G::a_kcontig ? t / kChunk + 16 * rep : t % kTile;
        const int64_t gr = r0 + r, gk = k0 + kk;
        as[kk][r] = gr < g.rows && gk < g.depth ? g.a(z, o, gr, gk) : T(0);
      }
#pragma unroll
      for (int rep = 0; rep < 4; ++rep) {
        const int kk = G::b_ccontig ? t / kTile + 4 * rep : t % kChunk;
        const int c = G::b_ccontig ? t % kTile : t / kChunk + 16 * rep;
        const int64_t gc = c0 + c, gk = k0 + kk;
        bs[kk][c] = gc < g.cols && gk < g.depth ? g.b(z, o, gk, gc) : T(0);
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        const int kk = reversed ? kChunk - 1 - i : i;
        T av[4], bv[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) av[a] = as[kk][ty + 16 * a];
#pragma unroll
        for (int b = 0; b < 4; ++b) bv[b] = bs[kk][tx + 16 * b];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int b = 0; b < 4; ++b) acc[a][b] = Mac::mac(acc[a][b], av[a], bv[b]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) total[a][b] = g.fold(total[a][b], acc[a][b], o);
  }
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int64_t r = r0 + ty + 16 * a, c = c0 + tx + 16 * b;
      if (r < g.rows && c < g.cols) g.store(z, r, c, total[a][b]);
    }
}

int grid_for(int64_t n, int threads) { return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 1 << 20)); }

// ---- float64 tensors across the bus in their narrowest exact type (oracles/exact_transfer.h) ----
// Page-locked host staging (a copy from it runs at the bus's speed, where pageable memory is
// copied through the driver's own buffer first) and device staging, kept from call to call and
// grown to the largest narrow tensor; float64 tensors skip them.
struct Staging {
  void* host = nullptr;
  size_t host_bytes = 0;
  DeviceBuffer<uint8_t> device;
  DeviceBuffer<int> rank{1};
  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    if (host) cudaFreeHost(host);
  }
  void* host_at_least(size_t bytes) {
    if (host_bytes < bytes) {
      if (host) cudaFreeHost(host);
      host = nullptr, host_bytes = 0;
      AF_CUDA(cudaMallocHost(&host, bytes));
      host_bytes = bytes;
    }
    return host;
  }
  uint8_t* device_at_least(size_t bytes) {
    if (device.size() < bytes) {
      device = DeviceBuffer<uint8_t>();
      device = DeviceBuffer<uint8_t>(bytes);
    }
    return device.get();
  }
};
Staging& staging() {
  thread_local Staging s;
  return s;
}

int stride_grid(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

__global__ void widen_exact(const uint8_t* src, int width, double* dst, int64_t n) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[e] = width == 4 ? static_cast<double>(reinterpret_cast<const float*>(src)[e])
                        : static_cast<double>(__uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(src)[e]) << 16));
}

// The width rank every element needs (0 bf16, 1 fp32, 2 float64: exact_transfer.h's rule), the
// largest into *rank (which starts at 0).
__global__ void exact_width_rank(const double* src, int64_t n, int* rank) {
  int r = 0;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double x = src[e];
    const float f = __double2float_rn(x);
    if (__double_as_longlong(static_cast<double>(f)) != __double_as_longlong(x))
      r = 2;
    else if ((__float_as_uint(f) & 0xffffu) != 0)
      r = max(r, 1);
  }
  for (int off = 16; off > 0; off /= 2) r = max(r, __shfl_xor_sync(0xffffffffu, r, off));
  if ((threadIdx.x & 31) == 0 && r > 0) atomicMax(rank, r);
}

__global__ void pack_exact_device(const double* src, int width, uint8_t* dst, int64_t n) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float f = __double2float_rn(src[e]);
    if (width == 4)
      reinterpret_cast<float*>(dst)[e] = f;
    else
      reinterpret_cast<uint16_t*>(dst)[e] = static_cast<uint16_t>(__float_as_uint(f) >> 16);
  }
}

// ATTNFUZZ_ORACLE_TRANSFER=float64 sends every tensor as float64 (for measuring what the
// narrow transfers save; the values are the same either way).
bool narrow_transfers() {
  static const bool narrow = [] {
    const char* e = std::getenv("ATTNFUZZ_ORACLE_TRANSFER");
    return !(e && std::string(e) == "float64");
  }();
  return narrow;
}

// Host float64 [0, dst.size()) -> device float64, through the narrowest exact type.
void upload_exact(double* dst, const double* src, size_t n) {
  if (n == 0) return;
  const ExactWidth w = narrow_transfers() ? narrowest_exact(src, n) : ExactWidth::f64;
  if (w == ExactWidth::f64) {
    AF_CUDA(cudaMemcpy(dst, src, n * sizeof(double), cudaMemcpyHostToDevice));
    return;
  }
  const size_t bytes = n * bytes_of(w);
  void* h = staging().host_at_least(bytes);
  pack_exact(src, n, w, h);
  uint8_t* d = staging().device_at_least(bytes);
  AF_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  widen_exact<<<stride_grid(static_cast<int64_t>(n)), kThreads>>>(d, static_cast<int>(bytes_of(w)), dst, static_cast<int64_t>(n));
  AF_CUDA(cudaGetLastError());
}
void upload_exact(DeviceBuffer<double>& dst, const double* src) { upload_exact(dst.get(), src, dst.size()); }

// Device float64 -> host, through the narrowest exact type the device finds (one small copy of
// the answer first): for outputs stored in the case dtype.
void download_exact(const double* src, size_t n, double* dst) {
  if (n == 0) return;
  const auto whole = [&] { AF_CUDA(cudaMemcpy(dst, src, n * sizeof(double), cudaMemcpyDeviceToHost)); };
  if (!narrow_transfers()) return whole();
  int* rank = staging().rank.get();
  AF_CUDA(cudaMemset(rank, 0, sizeof(int)));
  exact_width_rank<<<stride_grid(static_cast<int64_t>(n)), kThreads>>>(src, static_cast<int64_t>(n), rank);
  AF_CUDA(cudaGetLastError());
  int r = 2;
  AF_CUDA(cudaMemcpy(&r, rank, sizeof(int), cudaMemcpyDeviceToHost));
  if (r == 2) return whole();
  const ExactWidth w = r == 0 ? ExactWidth::bf16 : ExactWidth::f32;
  const size_t bytes = n * bytes_of(w);
  uint8_t* d = staging().device_at_least(bytes);
  pack_exact_device<<<stride_grid(static_cast<int64_t>(n)), kThreads>>>(src, static_cast<int>(bytes_of(w)), d, static_cast<int64_t>(n));
  AF_CUDA(cudaGetLastError());
  void* h = staging().host_at_least(bytes);
  AF_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  unpack_exact(h, n, w, dst);
}
void download_exact(const DeviceBuffer<double>& src, double* dst) { download_exact(src.get(), src.size(), dst); }

// An output's device memory: written by the kernels, then kept by the mirror once downloaded.
struct FreshDoubles {
  std::shared_ptr<DeviceCopy> copy;
  double* get() const { return static_cast<double*>(copy->data()); }
  size_t size() const { return copy->bytes() / sizeof(double); }
  // To the host, whole or in the narrowest exact type (download_exact); the host then holds the
  // device's bytes, and whoever sends them next finds this copy.
  void download_to(double* host, bool narrow = false) const {
    if (narrow)
      download_exact(get(), size(), host);
    else if (size())
      AF_CUDA(cudaMemcpy(host, get(), size() * sizeof(double), cudaMemcpyDeviceToHost));
    remember_copy(host, size(), copy);
  }
};
FreshDoubles fresh_doubles(int64_t n) { return {std::make_shared<DeviceCopy>(static_cast<size_t>(n) * sizeof(double))}; }

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

template <class T, class Mac, class G>
void launch_product(const G& g, int64_t z_count, bool reversed) {
  const dim3 grid(static_cast<unsigned>((g.cols + kTile - 1) / kTile), static_cast<unsigned>((g.rows + kTile - 1) / kTile),
                  static_cast<unsigned>(z_count));
  tile_gemm<T, Mac, G><<<grid, kThreads>>>(g, reversed);
  AF_CUDA(cudaGetLastError());
}

}  // namespace
}  // namespace attnfuzz::gpu
