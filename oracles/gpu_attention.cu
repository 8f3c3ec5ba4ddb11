// The float64 reference and the contract baselines on the GPU (see gpu_attention.h).
//
// One tiled matrix-product kernel (tile_gemm) serves every product. Each thread owns a 4 x 4
// block of a 64 x 64 output tile and accumulates it over the reduction dimension in order,
// 16 terms at a time staged through shared memory, forward or reversed. With the reference
// the accumulation is a fused multiply-add in float64; with a contract it is a multiply and
// an add, each rounded (no contraction), so every output element sees exactly the sequence
// of roundings oracles/emulated.cpp applies. Terms the mask zeroes (P = 0, dS = 0) are
// skipped a 64-wide block at a time: adding an exact +0 never changes a sum that starts at
// +0, so skipping keeps the result bit for bit.
//
// Transcendentals: the contract baselines take exp, log and tanh of fp32 values correctly
// rounded (computed in float64, rounded once). glibc's expf, logf and tanhf, which the CPU
// emulation calls, are not always correctly rounded (docs/gpu.md gives the rates), so the
// two baselines can differ where one of those calls lands on the other side of a rounding
// boundary: by one fp32 ulp of a score, a probability or an LSE, and what that moves
// downstream. Everything else matches bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "oracles/device_common.cuh"
#include "oracles/gpu_attention.h"

namespace attnfuzz::gpu {
namespace {

// ---- arithmetic: explicitly rounded operations (nvcc would contract a * b + c) ----
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
// fp32 transcendentals correctly rounded through float64 (see the top of this file).
__device__ __forceinline__ float exp_t(float x) { return __double2float_rn(exp(static_cast<double>(x))); }
__device__ __forceinline__ double exp_t(double x) { return exp(x); }
__device__ __forceinline__ float log_t(float x) { return __double2float_rn(log(static_cast<double>(x))); }
__device__ __forceinline__ double log_t(double x) { return log(x); }
__device__ __forceinline__ float tanh_t(float x) { return __double2float_rn(tanh(static_cast<double>(x))); }
__device__ __forceinline__ double tanh_t(double x) { return tanh(x); }
template <class T>
__device__ __forceinline__ T neg_inf() {
  return -static_cast<T>(INFINITY);
}

// The contract baselines: a rounded product, then a rounded sum (FusedMac: device_common.cuh).
struct RoundedMac {
  template <class T>
  __device__ static __forceinline__ T mac(T acc, T a, T b) {
    return add_rn(acc, mul_rn(a, b));
  }
};

// Significand rounded to `bits` explicit bits, nearest even (harness/dtype.cpp's round_mantissa).
__device__ __forceinline__ float round_mantissa(float f, int bits) {
  if (bits >= 23 || !isfinite(f)) return f;
  const unsigned x = __float_as_uint(f);
  const int drop = 23 - bits;
  const unsigned half = 1u << (drop - 1), lsb = (x >> drop) & 1u;
  return __uint_as_float((x + half - 1u + lsb) & ~((1u << drop) - 1u));
}
// A matmul operand as the contract rounds it (oracles/emulated.cpp's Numerics::op).
__device__ __forceinline__ double operand(double x, Contract) { return x; }
__device__ __forceinline__ float operand(float x, Contract c) {
  switch (c) {
    case Contract::tf32:
      return round_mantissa(x, 10);
    case Contract::tf32x3: {  // harness/dtype.cpp's round_tf32x3
      const float big = round_mantissa(x, 10);
      return __fadd_rn(big, round_mantissa(__fsub_rn(x, big), 10));
    }
    case Contract::fp16:
      return __half2float(__float2half_rn(x));
    case Contract::bf16:
      return __bfloat162float(__float2bfloat16_rn(x));
    default:
      return x;
  }
}
// An output stored in the case dtype (Numerics::store); `keep` for the reference and fp64.
template <class T>
__device__ __forceinline__ double stored(T x, DType d, bool keep) {
  if (keep) return static_cast<double>(x);
  const float f = static_cast<float>(x);
  switch (d) {
    case DType::f16:
      return __half2float(__float2half_rn(f));
    case DType::bf16:
      return __bfloat162float(__float2bfloat16_rn(f));
    default:
      return f;
  }
}

// S_pre = scale * Q K^T  (z: query head; rows i, cols j, depth d)
template <class T>
struct ScoresProduct {
  static constexpr bool a_kcontig = true, b_ccontig = false;
  const T *q, *k;
  T* s;
  T scale;
  MaskView m;
  Heads h;
  int64_t rows, cols, depth;
  int outer = 1;
  __device__ T a(int z, int, int64_t i, int64_t d) const { return q[((h.first_q + z) * rows + i) * depth + d]; }
  __device__ T b(int z, int, int64_t d, int64_t j) const { return k[((h.first_q + z) / h.group * cols + j) * depth + d]; }
  __device__ bool skip_tile(int z, int, int64_t r0, int64_t c0) const { return m.tile_empty(h.first_q + z, r0 / kTile, c0 / kTile); }
  __device__ bool skip_chunk(int, int, int64_t, int64_t, int64_t) const { return false; }
  __device__ T fold(T, T acc, int) const { return acc; }
  __device__ void store(int z, int64_t i, int64_t j, T x) const { s[(static_cast<int64_t>(z) * rows + i) * cols + j] = mul_rn(x, scale); }
};

// dP = dO V^T
template <class T>
struct DpProduct {
  static constexpr bool a_kcontig = true, b_ccontig = false;
  const T *d_out, *v;
  T* dp;
  MaskView m;
  Heads h;
  int64_t rows, cols, depth;
  int outer = 1;
  __device__ T a(int z, int, int64_t i, int64_t d) const { return d_out[((h.first_q + z) * rows + i) * depth + d]; }
  __device__ T b(int z, int, int64_t d, int64_t j) const { return v[((h.first_q + z) / h.group * cols + j) * depth + d]; }
  __device__ bool skip_tile(int z, int, int64_t r0, int64_t c0) const { return m.tile_empty(h.first_q + z, r0 / kTile, c0 / kTile); }
  __device__ bool skip_chunk(int, int, int64_t, int64_t, int64_t) const { return false; }
  __device__ T fold(T, T acc, int) const { return acc; }
  __device__ void store(int z, int64_t i, int64_t j, T x) const { dp[(static_cast<int64_t>(z) * rows + i) * cols + j] = x; }
};

// out[zq][i][d] = scale * sum_j X[zq][i][j] Y[zk][j][d], with X = P (O = P V) or dS (dQ = scale dS K).
template <class T>
struct RowProduct {
  static constexpr bool a_kcontig = true, b_ccontig = true;
  const T* x;  // chunk-local [z][Sq][Skv]
  const T* y;  // whole problem [B*Hkv][Skv][D]
  double* out;
  T scale;
  bool scaled;
  Contract contract;
  DType dtype;
  bool keep;
  MaskView m;
  Heads h;
  int64_t rows, cols, depth;  // Sq, D, Skv
  int outer = 1;
  __device__ T a(int z, int, int64_t i, int64_t j) const { return operand(x[(static_cast<int64_t>(z) * rows + i) * depth + j], contract); }
  __device__ T b(int z, int, int64_t j, int64_t d) const { return y[((h.first_q + z) / h.group * depth + j) * cols + d]; }
  __device__ bool skip_tile(int, int, int64_t, int64_t) const { return false; }
  __device__ bool skip_chunk(int z, int, int64_t r0, int64_t, int64_t k0) const {
    return m.tile_empty(h.first_q + z, r0 / kTile, k0 / kTile);
  }
  __device__ T fold(T, T acc, int) const { return scaled ? mul_rn(scale, acc) : acc; }
  __device__ void store(int z, int64_t i, int64_t d, T v) const { out[((h.first_q + z) * rows + i) * cols + d] = stored(v, dtype, keep); }
};

// out[zk][j][d] = sum over the group's heads o of scale * sum_i X[zq][i][j] Y[zq][i][d], with
// X = dS, Y = Q (dK) or X = P, Y = dO (dV). z: kv head of the chunk.
template <class T>
struct ColumnProduct {
  static constexpr bool a_kcontig = false, b_ccontig = true;
  const T* x;  // chunk-local [zq][Sq][Skv]
  const T* y;  // whole problem [B*Hq][Sq][D]
  double* out;
  T scale;
  bool scaled;
  Contract contract;
  DType dtype;
  bool keep;
  MaskView m;
  Heads h;
  int64_t rows, cols, depth;  // Skv, D, Sq
  int outer;                  // the group size
  __device__ int64_t zq(int z, int o) const { return static_cast<int64_t>(z) * outer + o; }
  __device__ T a(int z, int o, int64_t j, int64_t i) const { return operand(x[(zq(z, o) * depth + i) * rows + j], contract); }
  __device__ T b(int z, int o, int64_t i, int64_t d) const { return y[((h.first_q + zq(z, o)) * depth + i) * cols + d]; }
  __device__ bool skip_tile(int, int, int64_t, int64_t) const { return false; }
  __device__ bool skip_chunk(int z, int o, int64_t r0, int64_t, int64_t k0) const {
    return m.tile_empty(h.first_q + zq(z, o), k0 / kTile, r0 / kTile);
  }
  __device__ T fold(T total, T acc, int) const { return add_rn(total, scaled ? mul_rn(scale, acc) : acc); }
  __device__ void store(int z, int64_t j, int64_t d, T v) const {
    out[((h.first_q / outer + z) * rows + j) * cols + d] = stored(v, dtype, keep);
  }
};

// ---- element-wise steps ----
// The score from S_pre: S = softcap(S_pre) + bias, each step rounded in T (emulated.cpp's order).
struct Score {
  bool capped;
  double c;
  BiasView bias;
  template <class T>
  __device__ T of(T s_pre, int64_t zq, int64_t i, int64_t j) const {
    const T s = capped ? mul_rn(static_cast<T>(c), tanh_t(div_rn(s_pre, static_cast<T>(c)))) : s_pre;
    return bias.on() ? add_rn(s, static_cast<T>(bias.at(zq, i, j))) : s;  // the bias is in the case dtype: exact in T
  }
};

// LSE of each row, the sum over visible keys in order (the contract baselines).
template <class T>
__global__ void row_lse_ordered(const T* s, T* lse, MaskView m, Heads h, Score score, int64_t heads, bool reversed) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= heads * m.sq) return;
  const int64_t z = row / m.sq, i = row % m.sq, zq = h.first_q + z;
  const T* sr = s + row * m.skv;
  T mx = neg_inf<T>();
  for (int64_t j = 0; j < m.skv; ++j)
    if (m.visible(zq, i, j)) {
      const T x = score.of(sr[j], zq, i, j);
      mx = mx < x ? x : mx;  // std::max(m, x)
    }
  if (mx == neg_inf<T>()) {
    lse[zq * m.sq + i] = mx;
    return;
  }
  T l = 0;
  for (int64_t n = 0; n < m.skv; ++n) {
    const int64_t j = reversed ? m.skv - 1 - n : n;
    if (m.visible(zq, i, j)) l = add_rn(l, exp_t(sub_rn(score.of(sr[j], zq, i, j), mx)));
  }
  lse[zq * m.sq + i] = add_rn(mx, log_t(l));
}

// LSE of each row, one warp per row (the reference; the order is free).
__global__ void row_lse_warp(const double* s, double* lse, MaskView m, Heads h, Score score, int64_t heads) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= heads * m.sq) return;
  const int64_t z = row / m.sq, i = row % m.sq, zq = h.first_q + z;
  const double* sr = s + row * m.skv;
  double mx = -INFINITY;
  for (int64_t j = lane; j < m.skv; j += 32)
    if (m.visible(zq, i, j)) mx = fmax(mx, score.of(sr[j], zq, i, j));
  for (int off = 16; off; off /= 2) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (mx == -INFINITY) {
    if (lane == 0) lse[zq * m.sq + i] = mx;
    return;
  }
  double l = 0;
  for (int64_t j = lane; j < m.skv; j += 32)
    if (m.visible(zq, i, j)) l += exp(score.of(sr[j], zq, i, j) - mx);
  for (int off = 16; off; off /= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
  if (lane == 0) lse[zq * m.sq + i] = mx + log(l);
}

template <class T>
__device__ T probability(const T* lse, const MaskView& m, const Score& score, int64_t zq, int64_t i, int64_t j, T s_pre) {
  const T l = lse[zq * m.sq + i];
  if (l == neg_inf<T>() || !m.visible(zq, i, j)) return T(0);
  return exp_t(sub_rn(score.of(s_pre, zq, i, j), l));
}

// S_pre -> P in place.
template <class T>
__global__ void probabilities(T* s, const T* lse, MaskView m, Heads h, Score score, int64_t heads) {
  const int64_t n = heads * m.sq * m.skv;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % m.skv, i = (e / m.skv) % m.sq, z = e / (m.skv * m.sq);
    s[e] = probability(lse, m, score, h.first_q + z, i, j, s[e]);
  }
}

// S_pre -> P and dP -> dS in place: dS = P (dP - D + g), times 1 - tanh^2 under a softcap (the
// bias, added after the softcap, moves no chain factor).
template <class T>
__global__ void score_gradients(T* s, T* dp, const T* lse, const T* delta, const T* d_lse, MaskView m, Heads h, Score score, int64_t heads,
                                bool reference) {
  const int64_t n = heads * m.sq * m.skv;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % m.skv, i = (e / m.skv) % m.sq, zq = h.first_q + e / (m.skv * m.sq);
    const T s_pre = s[e];
    const T p = probability(lse, m, score, zq, i, j, s_pre);
    T ds = 0;
    if (p != T(0)) {
      const T d = delta[zq * m.sq + i], g = d_lse[zq * m.sq + i];
      // Eigen's order for the reference (dP - (D - g)); emulated.cpp's for the baselines.
      ds = reference ? mul_rn(p, sub_rn(dp[e], sub_rn(d, g))) : mul_rn(p, add_rn(sub_rn(dp[e], d), g));
      if (score.capped) {
        const T th = tanh_t(div_rn(s_pre, static_cast<T>(score.c)));
        ds = mul_rn(ds, sub_rn(T(1), mul_rn(th, th)));
      }
    }
    s[e] = p;
    dp[e] = ds;
  }
}

// D_i = sum_d dO_id O_id, in order.
template <class T>
__global__ void row_delta(const T* d_out, const T* o, T* delta, int64_t rows, int64_t dim, bool reversed) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  T acc = 0;
  for (int64_t n = 0; n < dim; ++n) {
    const int64_t d = reversed ? dim - 1 - n : n;
    acc = add_rn(acc, mul_rn(d_out[r * dim + d], o[r * dim + d]));
  }
  delta[r] = acc;
}

// Host float64 -> device T, rounded as a matmul operand of the contract (or only converted).
template <class T>
__global__ void to_device_type(const double* in, T* out, int64_t n, Contract c, bool as_operand) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T x = static_cast<T>(in[e]);
    out[e] = as_operand ? operand(x, c) : x;
  }
}

template <class T>
__global__ void lse_out(const T* lse, double* out, int64_t n) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < n) out[e] = static_cast<double>(lse[e]);  // fp32 LSE under a contract, float64 otherwise
}

// An input in the working type: the float64 device copy itself (oracles/device_mirror.h), or
// converted from it (rounded as a matmul operand of the contract where asked).
template <class T>
struct DeviceInput {
  SharedCopy source;
  DeviceBuffer<T> converted;
  const T* get() const {
    if constexpr (std::is_same_v<T, double>) return source->doubles();
    return converted.get();
  }
};

// Everything one call keeps on the device: inputs in the working type, the mask and its tiles,
// the score bias.
template <class T>
struct DeviceProblem {
  const HostAttention& a;
  Numerics n;
  int64_t group, rows_q;
  DeviceInput<T> q, k, v;
  DeviceMask mask;
  DeviceBias bias;

  DeviceProblem(const HostAttention& a_, const Numerics& n_)
      : a(a_), n(n_), group(a.heads_q / a.heads_kv), rows_q(a.batch * a.heads_q * a.seq_q), mask(a), bias(a) {
    upload_operand(q, a.q, rows_q * a.dim_qk);
    upload_operand(k, a.k, a.batch * a.heads_kv * a.seq_kv * a.dim_qk);
    upload_operand(v, a.v, a.batch * a.heads_kv * a.seq_kv * a.dim_v);
  }

  MaskView view() const { return mask.view(); }
  Score score() const { return {a.softcap.has_value(), a.softcap.value_or(1.0), bias.view()}; }
  bool keep() const { return n.reference64 || n.contract == Contract::fp64; }

  // Host float64 -> device T; `operand` rounds as the contract's matmul operand.
  void upload_operand(DeviceInput<T>& dst, const double* src, int64_t count, bool as_operand = true) {
    dst.source = device_copy(src, static_cast<size_t>(count));
    if constexpr (std::is_same_v<T, double>) {
      if (as_operand && !keep()) throw std::logic_error("float64 buffers hold only float64 operands");
    } else {
      dst.converted = DeviceBuffer<T>(static_cast<size_t>(count));
      to_device_type<T><<<grid_for(count, kThreads), kThreads>>>(dst.source->doubles(), dst.converted.get(), count, n.contract, as_operand);
      AF_CUDA(cudaGetLastError());
    }
  }

  // Query heads per chunk: whole groups, with the Sq x Skv scratch buffers within a budget.
  int64_t chunk_heads(int buffers) const {
    size_t free_b = 0, total_b = 0;
    AF_CUDA(cudaMemGetInfo(&free_b, &total_b));
    const double budget = std::min(static_cast<double>(free_b) * 0.6, 8.0 * (1ull << 30));
    const double per_head = static_cast<double>(buffers) * static_cast<double>(a.seq_q * a.seq_kv) * sizeof(T);
    const int64_t groups = std::max<int64_t>(1, static_cast<int64_t>(budget / (per_head * static_cast<double>(group))));
    // grid.z of one launch holds at most 65535 heads.
    return std::min<int64_t>({groups, a.batch * a.heads_kv, std::max<int64_t>(1, 65535 / group)}) * group;
  }

  // Scores of query heads [first, first + heads) into s; their LSE into lse (whole-problem rows).
  void scores_and_lse(T* s, T* lse, int64_t first, int64_t heads) {
    const Heads h{first, group};
    ScoresProduct<T> sp{q.get(), k.get(), s, static_cast<T>(a.scale), view(), h, a.seq_q, a.seq_kv, a.dim_qk};
    product(sp, heads);
    if constexpr (std::is_same_v<T, double>) {
      if (n.reference64) {
        row_lse_warp<<<grid_for(heads * a.seq_q * 32, kThreads), kThreads>>>(s, lse, view(), h, score(), heads);
        AF_CUDA(cudaGetLastError());
        return;
      }
    }
    row_lse_ordered<T><<<grid_for(heads * a.seq_q, 128), 128>>>(s, lse, view(), h, score(), heads, n.reversed);
    AF_CUDA(cudaGetLastError());
  }

  // The reference's products fuse multiply and add; the baselines' round each, in their order.
  template <class G>
  void product(const G& g, int64_t z_count) {
    if constexpr (std::is_same_v<T, double>) {
      if (n.reference64) return launch_product<T, FusedMac>(g, z_count, false);
    }
    launch_product<T, RoundedMac>(g, z_count, n.reversed);
  }
};

// The reference's outputs come back whole; the baselines' (stored in the case dtype) in the
// narrowest exact type.
void fetch_and_remember(const FreshDoubles& d, double* host, const Numerics& n) { d.download_to(host, !n.reference64); }

template <class T>
void forward_impl(const HostAttention& a, const Numerics& n, double* o, double* lse_out_host, Timing* timing) {
  auto t0 = Clock::now();
  DeviceProblem<T> dp(a, n);
  DeviceBuffer<T> lse(static_cast<size_t>(dp.rows_q));
  const auto out = fresh_doubles(dp.rows_q * a.dim_v), lse_d = fresh_doubles(dp.rows_q);
  AF_CUDA(cudaDeviceSynchronize());
  if (timing) timing->upload_ms = ms_since(t0);
  t0 = Clock::now();
  const int64_t per_chunk = dp.chunk_heads(1);
  T* s = scratch<T>(0, static_cast<size_t>(per_chunk * a.seq_q * a.seq_kv));
  for (int64_t first = 0; first < a.batch * a.heads_q; first += per_chunk) {
    const int64_t heads = std::min(per_chunk, a.batch * a.heads_q - first);
    dp.scores_and_lse(s, lse.get(), first, heads);
    probabilities<T>
        <<<grid_for(heads * a.seq_q * a.seq_kv, kThreads), kThreads>>>(s, lse.get(), dp.view(), Heads{first, dp.group}, dp.score(), heads);
    AF_CUDA(cudaGetLastError());
    RowProduct<T> pv{s,       dp.v.get(), out.get(), T(1), false, n.contract, n.dtype, dp.keep(), dp.view(), Heads{first, dp.group},
                     a.seq_q, a.dim_v,    a.seq_kv};
    dp.product(pv, heads);
  }
  lse_out<T><<<grid_for(dp.rows_q, kThreads), kThreads>>>(lse.get(), lse_d.get(), dp.rows_q);
  AF_CUDA(cudaGetLastError());
  AF_CUDA(cudaDeviceSynchronize());
  if (timing) timing->compute_ms = ms_since(t0);
  t0 = Clock::now();
  // The baselines store O in the case dtype and the LSE in fp32: they come back narrow.
  fetch_and_remember(out, o, n);
  fetch_and_remember(lse_d, lse_out_host, n);
  if (timing) timing->download_ms = ms_since(t0);
}

template <class T>
void backward_impl(const HostAttention& a, const Numerics& n, const double* o_host, const double* d_out_host, const double* d_lse_host,
                   double* dq_host, double* dk_host, double* dv_host, Timing* timing) {
  auto t0 = Clock::now();
  DeviceProblem<T> dp(a, n);
  const int64_t rows_q = dp.rows_q, rows_kv = a.batch * a.heads_kv * a.seq_kv;
  DeviceInput<T> d_out_op, d_out_raw, o_raw, d_lse;
  dp.upload_operand(d_out_op, d_out_host, rows_q * a.dim_v);
  // In float64 the operand is the value itself: one copy serves both.
  constexpr bool wide = std::is_same_v<T, double>;
  if (!wide) dp.upload_operand(d_out_raw, d_out_host, rows_q * a.dim_v, false);
  const T* d_out_value = wide ? d_out_op.get() : d_out_raw.get();
  dp.upload_operand(o_raw, o_host, rows_q * a.dim_v, false);
  dp.upload_operand(d_lse, d_lse_host, rows_q, false);
  DeviceBuffer<T> lse(static_cast<size_t>(rows_q)), delta(static_cast<size_t>(rows_q));
  const auto dq = fresh_doubles(rows_q * a.dim_qk), dk = fresh_doubles(rows_kv * a.dim_qk), dv = fresh_doubles(rows_kv * a.dim_v);
  AF_CUDA(cudaDeviceSynchronize());
  if (timing) timing->upload_ms = ms_since(t0);
  t0 = Clock::now();
  row_delta<T><<<grid_for(rows_q, 128), 128>>>(d_out_value, o_raw.get(), delta.get(), rows_q, a.dim_v, n.reversed && !n.reference64);
  AF_CUDA(cudaGetLastError());
  const int64_t per_chunk = dp.chunk_heads(2);
  T* s = scratch<T>(0, static_cast<size_t>(per_chunk * a.seq_q * a.seq_kv));
  T* dpb = scratch<T>(1, static_cast<size_t>(per_chunk * a.seq_q * a.seq_kv));
  const T scale = static_cast<T>(a.scale);
  for (int64_t first = 0; first < a.batch * a.heads_q; first += per_chunk) {
    const int64_t heads = std::min(per_chunk, a.batch * a.heads_q - first);
    const Heads h{first, dp.group};
    dp.scores_and_lse(s, lse.get(), first, heads);
    dp.product(DpProduct<T>{d_out_op.get(), dp.v.get(), dpb, dp.view(), h, a.seq_q, a.seq_kv, a.dim_v}, heads);
    score_gradients<T><<<grid_for(heads * a.seq_q * a.seq_kv, kThreads), kThreads>>>(s, dpb, lse.get(), delta.get(), d_lse.get(), dp.view(),
                                                                                     h, dp.score(), heads, n.reference64);
    AF_CUDA(cudaGetLastError());
    dp.product(
        RowProduct<T>{dpb, dp.k.get(), dq.get(), scale, true, n.contract, n.dtype, dp.keep(), dp.view(), h, a.seq_q, a.dim_qk, a.seq_kv},
        heads);
    const int64_t kv_heads = heads / dp.group;
    dp.product(ColumnProduct<T>{dpb, dp.q.get(), dk.get(), scale, true, n.contract, n.dtype, dp.keep(), dp.view(), h, a.seq_kv, a.dim_qk,
                                a.seq_q, static_cast<int>(dp.group)},
               kv_heads);
    dp.product(ColumnProduct<T>{s, d_out_op.get(), dv.get(), T(1), false, n.contract, n.dtype, dp.keep(), dp.view(), h, a.seq_kv, a.dim_v,
                                a.seq_q, static_cast<int>(dp.group)},
               kv_heads);
  }
  AF_CUDA(cudaDeviceSynchronize());
  if (timing) timing->compute_ms = ms_since(t0);
  t0 = Clock::now();
  fetch_and_remember(dq, dq_host, n);
  fetch_and_remember(dk, dk_host, n);
  fetch_and_remember(dv, dv_host, n);
  if (timing) timing->download_ms = ms_since(t0);
}

void validate(const HostAttention& a) {
  if (a.heads_kv <= 0 || a.heads_q % a.heads_kv != 0) throw std::invalid_argument("heads_q must be a multiple of heads_kv");
  if (a.batch * a.heads_q > 65535 * 1024) throw std::invalid_argument("too many heads for one launch");
}

}  // namespace

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear it
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

std::string device_description() {
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "cuda";
  return std::string(p.name) + " sm_" + std::to_string(p.major) + std::to_string(p.minor);
}

// The *_impl functions return after their device buffers are freed; the time that takes is
// what is left of the call after upload, kernels and download.
void forward(const HostAttention& a, const Numerics& n, double* o, double* lse, Timing* t) {
  validate(a);
  const auto t0 = Clock::now();
  if (n.reference64 || n.contract == Contract::fp64)
    forward_impl<double>(a, n, o, lse, t);
  else
    forward_impl<float>(a, n, o, lse, t);
  if (t) t->release_ms = ms_since(t0) - t->upload_ms - t->compute_ms - t->download_ms;
}

void backward(const HostAttention& a, const Numerics& n, const double* o, const double* d_out, const double* d_lse, double* dq, double* dk,
              double* dv, Timing* t) {
  validate(a);
  const auto t0 = Clock::now();
  if (n.reference64 || n.contract == Contract::fp64)
    backward_impl<double>(a, n, o, d_out, d_lse, dq, dk, dv, t);
  else
    backward_impl<float>(a, n, o, d_out, d_lse, dq, dk, dv, t);
  if (t) t->release_ms = ms_since(t0) - t->upload_ms - t->compute_ms - t->download_ms;
}

}  // namespace attnfuzz::gpu
