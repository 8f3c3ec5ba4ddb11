// The error model's magnitudes on the GPU (see gpu_error_terms.h for the formulas).
//
// Per chunk of query heads (whole GQA groups, within the memory budget) five or six Sq x Skv
// float64 buffers hold the per-score quantities; every sum over keys or queries is a product
// of the shared tiled kernel (fused multiply-adds, 64 x 64 tiles the mask hides skipped), and
// the element-wise steps between them are kernels of their own. Squares are formed where an
// operand is loaded, so no squared copy of Q, K, V or dO is stored.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "oracles/device_common.cuh"
#include "oracles/gpu_error_terms.h"
#include "oracles/tied_keys.h"

namespace attnfuzz::gpu {
namespace {

// One chunk's per-score buffers, chunk-local [z][Sq][Skv].
struct ScoreBuffers {
  double* p;     // Q K^T, then P
  double* sens;  // Q^2 (K^2)^T, then the score sensitivity s
  double* pc;    // P times the softcap's chain rule; the same buffer as p without a softcap
  double* ds;    // dO V^T, then dS
  double* wd;    // dO^2 (V^2)^T, then wd
  double* ds2;   // dS2: what dS's operand rounding acts on
};

__device__ __forceinline__ double sq(double x) { return x * x; }
__device__ __forceinline__ double root(double x) { return sqrt(fmax(x, 0.0)); }  // sums of squares can round below 0

// out[z][i][j] = sum_d A[zq][i][d] B[zk][j][d], operands squared when `squares`:
// Q K^T, Q^2 (K^2)^T, dO V^T, dO^2 (V^2)^T.
struct PairProduct {
  static constexpr bool a_kcontig = true, b_ccontig = false;
  const double *x, *y;
  double* out;
  bool squares;
  MaskView m;
  Heads h;
  int64_t rows, cols, depth;  // Sq, Skv, D
  int outer = 1;
  __device__ double a(int z, int, int64_t i, int64_t d) const {
    const double v = x[((h.first_q + z) * rows + i) * depth + d];
    return squares ? v * v : v;
  }
  __device__ double b(int z, int, int64_t d, int64_t j) const {
    const double v = y[((h.first_q + z) / h.group * cols + j) * depth + d];
    return squares ? v * v : v;
  }
  __device__ bool skip_tile(int z, int, int64_t r0, int64_t c0) const { return m.tile_empty(h.first_q + z, r0 / kTile, c0 / kTile); }
  __device__ bool skip_chunk(int, int, int64_t, int64_t, int64_t) const { return false; }
  __device__ double fold(double, double acc, int) const { return acc; }
  __device__ void store(int z, int64_t i, int64_t j, double v) const { out[(static_cast<int64_t>(z) * rows + i) * cols + j] = v; }
};

// Per-score factors of the sums over keys (row products) and over queries (column products).
// fp32's smallest normal number: P below it is flushed by FTZ kernels (harness/error_model.h).
constexpr double kSmallestNormalF32 = 1.1754943508222875e-38;
__device__ __forceinline__ bool flushed(double p) { return p > 0 && p < kSmallestNormalF32; }

// e(x)^2 of the subnormal part (harness/error_model.h, fp16_subnormal_excess2): what rounding x to
// fp16 adds, below its smallest normal 2^-14, to the relative rounding 2^-11 |x|.
__device__ __forceinline__ double fp16_subnormal_excess2(double x) {
  const double a = fabs(x), floor = fmin(a, 0x1p-25), rel = 0x1p-11 * a;
  return floor > rel ? floor * floor - rel * rel : 0.0;
}

enum class Factor { p, p2, w2, pc, pc2, ds, ds2, wd2, p_flushed, abs_ds_flushed, p_subnormal2, ds_subnormal2 };
__device__ __forceinline__ double factor(const ScoreBuffers& s, Factor f, int64_t e) {
  switch (f) {
    case Factor::p:
      return s.p[e];
    case Factor::p2:
      return sq(s.p[e]);
    case Factor::w2:
      return sq(s.p[e] * s.sens[e]);
    case Factor::pc:
      return s.pc[e];
    case Factor::pc2:
      return sq(s.pc[e]);
    case Factor::ds:
      return s.ds[e];
    case Factor::ds2:
      return s.ds2[e];
    case Factor::p_flushed:
      return flushed(s.p[e]) ? s.p[e] : 0.0;
    case Factor::abs_ds_flushed:
      return flushed(s.p[e]) ? fabs(s.ds[e]) : 0.0;
    case Factor::p_subnormal2:
      return fp16_subnormal_excess2(s.p[e]);
    case Factor::ds_subnormal2: {  // e(P)^2 (dS / P)^2 + e(dS)^2
      const double p = s.p[e], ds = s.ds[e];
      return p > 0 ? fp16_subnormal_excess2(p) * sq(ds / p) + fp16_subnormal_excess2(ds) : 0.0;
    }
    default:
      return sq(s.wd[e]);
  }
}

// The right-hand side of a row product, [B*Hkv][Skv][D] (V or K): squared or plain.
enum class RowRhs { squared, plain };
// What a row product's sums become: O.operand; dQ.operand or dQ.score; dQ.via (the four
// parts, from |P_c K| and the row errors e_k).
enum class RowOut { root, scaled_root, via };

// out[zq][i][c] = f(sum_j X[z][i][j] Y[zk][j][c]), X a per-score factor.
struct RowProduct {
  static constexpr bool a_kcontig = true, b_ccontig = true;
  ScoreBuffers s;
  Factor x;
  const double* y;
  RowRhs rhs;
  int64_t y_dim;
  RowOut kind;
  double scale;
  double* out;
  double* const* via;    // RowOut::via: the four dQ.via arrays
  const double* d_err;   // RowOut::via: [4][B*Hq*Sq]
  int64_t rows_q_total;  // B*Hq*Sq
  MaskView m;
  Heads h;
  int64_t rows, cols, depth;  // Sq, output columns, Skv
  int outer = 1;
  __device__ double a(int z, int, int64_t i, int64_t j) const { return factor(s, x, (static_cast<int64_t>(z) * rows + i) * depth + j); }
  __device__ double b(int z, int, int64_t j, int64_t c) const {
    const double v = y[((h.first_q + z) / h.group * depth + j) * y_dim + c];
    return rhs == RowRhs::plain ? v : v * v;
  }
  __device__ bool skip_tile(int, int, int64_t, int64_t) const { return false; }
  __device__ bool skip_chunk(int z, int, int64_t r0, int64_t, int64_t k0) const {
    return m.tile_empty(h.first_q + z, r0 / kTile, k0 / kTile);
  }
  __device__ double fold(double, double acc, int) const { return acc; }
  __device__ void store(int z, int64_t i, int64_t c, double v) const {
    const int64_t row = (h.first_q + z) * rows + i;
    switch (kind) {
      case RowOut::root:
        out[row * cols + c] = root(v);
        break;
      case RowOut::scaled_root:
        out[row * cols + c] = scale * root(v);
        break;
      case RowOut::via:
        for (int k = 0; k < 4; ++k) via[k][row * cols + c] = scale * (d_err[k * rows_q_total + row] * fabs(v));
        break;
    }
  }
};

// The right-hand side of a column product, [B*Hq][Sq][D] (Q or dO): squared, plain, absolute
// (a sum of magnitudes, not rooted: the underflow term), or
// [e_0^2 Q^2 | e_1^2 Q^2 | e_2^2 Q^2 | e_3^2 Q^2] (dK.via's four parts in one pass).
enum class ColRhs { squared, plain, absolute, row_errors_squared };

// out[zk][j][c] = sqrt(factor * fold over the group's heads o of sum_i X[zq][i][j] Y[zq][i][c]),
// the fold a sum, or a sum of squares (`square_each`: a GQA group's per-head partials);
// ColRhs::absolute: factor * the sum, unrooted (`scale2` then the plain scale).
struct ColumnProduct {
  static constexpr bool a_kcontig = false, b_ccontig = true;
  ScoreBuffers s;
  Factor x;
  const double* y;
  ColRhs rhs;
  int64_t y_dim;
  bool square_each;
  double scale2;
  double* const* outs;  // one array, or four (ColRhs::row_errors_squared)
  const double* d_err;  // [4][B*Hq*Sq]
  int64_t rows_q_total;
  MaskView m;
  Heads h;
  int64_t rows, cols, depth;  // Skv, output columns, Sq
  int outer;                  // the group size
  __device__ int64_t zq(int z, int o) const { return static_cast<int64_t>(z) * outer + o; }
  __device__ double a(int z, int o, int64_t j, int64_t i) const { return factor(s, x, (zq(z, o) * depth + i) * rows + j); }
  __device__ double b(int z, int o, int64_t i, int64_t c) const {
    const int64_t row = (h.first_q + zq(z, o)) * depth + i;
    const double v = y[row * y_dim + c % y_dim];
    switch (rhs) {
      case ColRhs::plain:
        return v;
      case ColRhs::absolute:
        return fabs(v);
      case ColRhs::squared:
        return v * v;
      default:
        return sq(d_err[(c / y_dim) * rows_q_total + row]) * (v * v);
    }
  }
  __device__ bool skip_tile(int, int, int64_t, int64_t) const { return false; }
  __device__ bool skip_chunk(int z, int o, int64_t r0, int64_t, int64_t k0) const {
    return m.tile_empty(h.first_q + zq(z, o), k0 / kTile, r0 / kTile);
  }
  __device__ double fold(double total, double acc, int) const { return square_each ? fma(acc, acc, total) : total + acc; }
  __device__ void store(int z, int64_t j, int64_t c, double v) const {
    const int64_t row = (h.first_q / outer + z) * rows + j;
    const int part = rhs == ColRhs::row_errors_squared ? static_cast<int>(c / y_dim) : 0;
    outs[part][row * y_dim + c % y_dim] = rhs == ColRhs::absolute ? scale2 * v : root(scale2 * v);
  }
};

// Q K^T, Q^2 K^2^T -> P, s and P_c (every element written: tiles the mask hides hold no product).
// S = softcap(scale Q K^T) + bias: |S| in s is the biased score's.
__global__ void score_terms(ScoreBuffers s, const double* lse, MaskView m, BiasView bias, Heads h, int64_t heads, double scale, bool capped,
                            double cap, int64_t dim_qk) {
  const int64_t n = heads * m.sq * m.skv;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % m.skv, i = (e / m.skv) % m.sq, zq = h.first_q + e / (m.skv * m.sq);
    double p = 0, sens = 0, chain = 1;
    if (m.visible(zq, i, j)) {
      const double raw = s.p[e], raw_sq = s.sens[e];
      double score = scale * raw;
      if (capped) {
        const double t = tanh(score / cap);
        score = cap * t;
        chain = 1.0 - t * t;
      }
      if (bias.on()) score += bias.at(zq, i, j);
      const double l = lse[zq * m.sq + i];
      const bool live = isfinite(l);
      if (live) p = exp(score - l);
      sens = scale * sqrt((sq(raw) / 3.0 + root(raw_sq) * root(raw_sq) / 2.0) * (static_cast<double>(dim_qk) / 3.0)) + fabs(score) +
             (live ? fabs(l) : 0.0);
    }
    s.p[e] = p;
    s.sens[e] = sens;
    if (s.pc != s.p) s.pc[e] = p * chain;
  }
}

// O.score_id = sqrt(sum_j w_ij^2 (V_jd - O_id)^2), summed as written: expanding the square
// cancels to rounding noise where V is near constant or a row sees one key. LSE.score_i =
// sqrt(sum_j w_ij^2). A block: 8 rows x 32 columns d, keys 32 at a time through shared memory
// (8 rows and 32 keys never straddle a 64 x 64 mask tile, so hidden tiles are skipped whole).
constexpr int kScoreRows = 8, kScoreKeys = 32;
__global__ void __launch_bounds__(kScoreRows * 32) o_score_terms(ScoreBuffers s, const double* v, const double* o, double* o_score,
                                                                 double* lse_score, MaskView m, Heads h, int64_t dim_v) {
  __shared__ double w2s[kScoreRows][kScoreKeys];
  __shared__ double vs[kScoreKeys][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int z = blockIdx.z;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * 32 + tx, i0 = static_cast<int64_t>(blockIdx.y) * kScoreRows, i = i0 + ty;
  const int64_t zq = h.first_q + z, zk = zq / h.group;
  const bool live = i < m.sq && d < dim_v;
  const double od = live ? o[(zq * m.sq + i) * dim_v + d] : 0.0;
  double acc = 0, w2sum = 0;
  for (int64_t j0 = 0; j0 < m.skv; j0 += kScoreKeys) {
    if (m.tile_empty(zq, i0 / kTile, j0 / kTile)) continue;  // the same for the whole block
    const int64_t jj = j0 + tx;
    const int64_t e = (static_cast<int64_t>(z) * m.sq + i) * m.skv + jj;
    w2s[ty][tx] = i < m.sq && jj < m.skv ? sq(s.p[e] * s.sens[e]) : 0.0;
    for (int r = ty; r < kScoreKeys; r += kScoreRows) vs[r][tx] = j0 + r < m.skv && d < dim_v ? v[(zk * m.skv + j0 + r) * dim_v + d] : 0.0;
    __syncthreads();
    for (int k = 0; k < kScoreKeys; ++k) acc = fma(w2s[ty][k], sq(vs[k][tx] - od), acc);
    if (blockIdx.x == 0 && tx == 0)
      for (int k = 0; k < kScoreKeys; ++k) w2sum += w2s[ty][k];
    __syncthreads();
  }
  if (live) o_score[(zq * m.sq + i) * dim_v + d] = sqrt(acc);
  if (blockIdx.x == 0 && tx == 0 && i < m.sq) lse_score[zq * m.sq + i] = sqrt(w2sum);
}

// The LSE's truncation part (harness/error_model.h): Q with each column d weighted by the number
// of 16-product MMA steps it is carried through, w_d = ceil(Dqk / 16) - floor(d / 16).
__global__ void step_weighted(const double* q, double* out, int64_t rows, int64_t dim) {
  const int64_t n = rows * dim, steps = (dim + 15) / 16;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[e] = q[e] * static_cast<double>(steps - (e % dim) / 16);
}

// LSE.truncation_i = scale |sum_j P_c,ij (Q_w K^T)_ij|, one warp a query row; `weighted` holds
// Q_w K^T where the mask shows a tile (elsewhere P_c = 0 and it is not read).
__global__ void lse_truncation(ScoreBuffers s, const double* weighted, double* out, Heads h, int64_t heads, int64_t seq_q, int64_t skv,
                               double scale) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; row < heads * seq_q; row += warps) {
    const double* pc = s.pc + row * skv;
    const double* w = weighted + row * skv;
    double acc = 0;
    for (int64_t j = lane; j < skv; j += 32)
      if (pc[j] != 0) acc += pc[j] * w[j];
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) out[h.first_q * seq_q + row] = scale * fabs(acc);
  }
}

// Per row: D - g, and the row errors e_k of D from O's error parts (oracles/error_terms.cpp).
__global__ void row_errors(const double* d_out, const double* o, const double* o_operand, const double* o_score, const double* d_lse,
                           double* d_minus_g, double* d_err, int64_t row0, int64_t rows, int64_t rows_total, int64_t dim_v, double length) {
  const int64_t r = row0 + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= row0 + rows) return;
  double delta = 0, e[4] = {0, 0, 0, 0};
  for (int64_t d = 0; d < dim_v; ++d) {
    const int64_t x = r * dim_v + d;
    const double g2 = sq(d_out[x]), o2 = sq(o[x]), op2 = sq(o_operand[x]);
    delta += d_out[x] * o[x];
    e[0] += g2 * op2;
    e[1] += g2 * o2;
    e[2] += g2 * ((o2 / 3.0 + op2 / 2.0) * (length / 3.0));
    e[3] += g2 * sq(o_score[x]);
  }
  e[2] += delta * delta * (length / 6.0);  // O's normalizer: the whole row scaled alike
  d_minus_g[r] = delta - d_lse[r];
  for (int k = 0; k < 4; ++k) d_err[k * rows_total + r] = sqrt(e[k]);
}

// dO V^T, dO^2 V^2^T -> dS, wd and dS2.
__global__ void gradient_terms(ScoreBuffers s, const double* d_minus_g, MaskView m, Heads h, int64_t heads, int64_t dim_v) {
  const int64_t n = heads * m.sq * m.skv;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double pc = s.pc[e];
    double ds = 0, ds2 = 0, wd = 0;
    if (pc != 0) {  // P = 0 where masked: those dP were never computed
      const int64_t i = (e / m.skv) % m.sq, zq = h.first_q + e / (m.skv * m.sq);
      const double dp = s.ds[e], dg = d_minus_g[zq * m.sq + i];
      ds = pc * (dp - dg);
      ds2 = sq(ds) + sq(pc * dp) + sq(pc * dg);
      const double dp_err = sqrt((sq(dp) / 3.0 + root(s.wd[e]) * root(s.wd[e]) / 2.0) * (static_cast<double>(dim_v) / 3.0));
      // The softcap's chain factor 1 - t^2 from a rounded t: 2 t^2 / (1 - t^2) (oracles/error_terms.cpp).
      const double chain = s.pc != s.p ? pc / s.p[e] : 1.0;
      const double chain_sens = s.pc != s.p ? 2.0 * (1.0 - chain) / fmax(chain, 1e-300) : 0.0;
      wd = fabs(ds) * (s.sens[e] + chain_sens) + pc * dp_err;
    }
    s.ds[e] = ds;
    s.ds2[e] = ds2;
    s.wd[e] = wd;
  }
}

// Tied keys (oracles/tied_keys.h, oracles/error_terms.cpp): dQ's D errors with the tied keys'
// shared error added to the u_sc part, per query row of the chunk. tied[kv head] bit 0: V rows
// tied (dP_ij one number per row: its accumulation error, from dO_i and V's first row); bit 1: K
// rows tied (P_ij one number per row: dS's relative error s_i over the row's sum of dS).
__global__ void tied_key_errors(ScoreBuffers s, const double* d_out, const double* v, const uint8_t* tied, const double* d_err,
                                double* d_err_dq, Heads h, int64_t heads, int64_t seq_q, int64_t skv, int64_t dim_v,
                                int64_t rows_total) {
  const int64_t local = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (local >= heads * seq_q) return;
  const int64_t z = local / seq_q, i = local % seq_q, kvh = (h.first_q + z) / h.group, r = h.first_q * seq_q + local;
  for (int k = 0; k < 3; ++k) d_err_dq[k * rows_total + r] = d_err[k * rows_total + r];
  double e3 = d_err[3 * rows_total + r];
  if (tied[kvh]) {
    double sum_p = 0, sum_ds = 0, sum_sens = 0;
    for (int64_t j = 0; j < skv; ++j) {
      const int64_t e = (z * seq_q + i) * skv + j;
      const double pc = s.pc[e];
      if (pc <= 0) continue;
      const double chain = s.pc != s.p ? pc / s.p[e] : 1.0;
      const double chain_sens = s.pc != s.p ? 2.0 * (1.0 - chain) / fmax(chain, 1e-300) : 0.0;
      sum_p += pc, sum_ds += s.ds[e], sum_sens += pc * (s.sens[e] + chain_sens);
    }
    if (sum_p > 0) {
      double tied2 = 0;
      if (tied[kvh] & 1) {
        double dp = 0, rss2 = 0;
        for (int64_t d = 0; d < dim_v; ++d) {
          const double x = d_out[r * dim_v + d] * v[kvh * skv * dim_v + d];
          dp += x, rss2 += x * x;
        }
        tied2 += (sq(dp) / 3.0 + rss2 / 2.0) * (static_cast<double>(dim_v) / 3.0);
      }
      if (tied[kvh] & 2) tied2 += sq(sum_sens / sum_p * sum_ds / sum_p);
      e3 = sqrt(e3 * e3 + tied2);
    }
  }
  d_err_dq[3 * rows_total + r] = e3;
}

// Squared norms of the rows of a [rows][dim] array.
__global__ void row_norms2(const double* x, double* out, int64_t rows, int64_t dim) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  double acc = 0;
  for (int64_t d = 0; d < dim; ++d) acc = fma(x[r * dim + d], x[r * dim + d], acc);
  out[r] = acc;
}

__device__ __forceinline__ double participation(double sum, double sum_sq) { return sum_sq > 0 ? sum * sum / sum_sq : 0.0; }

// A query row's sources over keys j, a_j = factor_ij |Y_j|^2 (Y = V or K, norms per kv row):
// one warp per row of the chunk.
__global__ void query_row_sources(ScoreBuffers s, Factor f, const double* kv_norm2, double* out, Heads h, int64_t heads, int64_t sq,
                                  int64_t skv) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= heads * sq) return;
  const int64_t z = warp / sq, zk = (h.first_q + z) / h.group;
  double sum = 0, sum_sq = 0;
  for (int64_t j = lane; j < skv; j += 32) {
    const double a = factor(s, f, warp * skv + j) * kv_norm2[zk * skv + j];
    sum += a;
    sum_sq = fma(a, a, sum_sq);
  }
  for (int off = 16; off > 0; off /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, off);
    sum_sq += __shfl_down_sync(0xffffffffu, sum_sq, off);
  }
  if (lane == 0) out[h.first_q * sq + warp] = participation(sum, sum_sq);
}

// A key row's sources over the group's heads o and queries i, a_(o,i) = factor_ij |Y_i|^2
// (Y = Q or dO, norms per query row): one thread per key row (adjacent keys read adjacent scores).
__global__ void key_row_sources(ScoreBuffers s, Factor f, const double* q_norm2, double* out, Heads h, int64_t kv_heads, int64_t sq,
                                int64_t skv) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= kv_heads * skv) return;
  const int64_t zkv = r / skv, j = r % skv;
  double sum = 0, sum_sq = 0;
  for (int64_t o = 0; o < h.group; ++o) {
    const int64_t zq = zkv * h.group + o;
    for (int64_t i = 0; i < sq; ++i) {
      const double a = factor(s, f, (zq * sq + i) * skv + j) * q_norm2[(h.first_q + zq) * sq + i];
      sum += a;
      sum_sq = fma(a, a, sum_sq);
    }
  }
  out[(h.first_q / h.group) * skv + r] = participation(sum, sum_sq);
}

// dK's via blocks (oracles/gpu_error_terms.h, HostErrorTerms::via_tile_sum): per query row of
// the chunk and key tile, the sum over the tile's keys of P_c^2 (keys in order, without
// contraction), into key_sums[chunk row][tile].
__global__ void key_tile_sums(ScoreBuffers s, double* key_sums, int64_t rows, int64_t skv, int64_t tile, int64_t tiles) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * tiles; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / tiles, kt = t % tiles, j1 = min(skv, (kt + 1) * tile);
    double acc = 0;
    for (int64_t j = kt * tile; j < j1; ++j) acc = __dadd_rn(acc, __dmul_rn(s.pc[row * skv + j], s.pc[row * skv + j]));
    key_sums[t] = acc;
  }
}

// Per query row (every row of the problem) and column tile: the sum over the tile's columns of Q^2.
__global__ void col_tile_sums(const double* q, double* col_sums, int64_t rows, int64_t dim, int64_t tile, int64_t tiles) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * tiles; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = t / tiles, ct = t % tiles, d1 = min(dim, (ct + 1) * tile);
    double acc = 0;
    for (int64_t d = ct * tile; d < d1; ++d) acc = __dadd_rn(acc, __dmul_rn(q[row * dim + d], q[row * dim + d]));
    col_sums[t] = acc;
  }
}

// One thread per (key-value head of the chunk, key tile, column tile): over the group's queries i,
// v_i = scale^2 d_err_k(i)^2 key_sums(i, kt) col_sums(i, ct) per rounding unit k, and the sums of
// v_i and v_i^2 into [kv head][kt][ct][k] (the CPU's order of the indices, oracles/error_terms.cpp).
__global__ void via_tile_blocks(const double* key_sums, const double* col_sums, const double* d_err, double* sum, double* sum_sq, Heads h,
                                int64_t kv_heads, int64_t sq, int64_t key_tiles, int64_t col_tiles, int64_t rows_total, double scale2) {
  const int64_t n = kv_heads * key_tiles * col_tiles;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t zk = t / (key_tiles * col_tiles), kt = t / col_tiles % key_tiles, ct = t % col_tiles;
    double s1[4] = {0, 0, 0, 0}, s2[4] = {0, 0, 0, 0};
    for (int64_t o = 0; o < h.group; ++o)
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t row = (zk * h.group + o) * sq + i, global = h.first_q * sq + row;
        const double block = key_sums[row * key_tiles + kt] * col_sums[global * col_tiles + ct];
        for (int k = 0; k < 4; ++k) {
          const double e = d_err[k * rows_total + global], v = scale2 * (e * e) * block;
          s1[k] += v;
          s2[k] += v * v;
        }
      }
    const int64_t at = ((h.first_q / h.group + zk) * key_tiles + kt) * col_tiles + ct;
    for (int k = 0; k < 4; ++k) sum[at * 4 + k] = s1[k], sum_sq[at * 4 + k] = s2[k];
  }
}

// One thread per key-value head of the chunk: the same over the whole head, v_i = scale^2
// d_err_k(i)^2 (sum_j P_c,ij^2) |Q_i|^2, into [kv head][k].
__global__ void via_head_blocks(const double* key_sums, const double* q_norm2, const double* d_err, double* sum, double* sum_sq, Heads h,
                                int64_t kv_heads, int64_t sq, int64_t key_tiles, int64_t rows_total, double scale2) {
  const int64_t zk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (zk >= kv_heads) return;
  double s1[4] = {0, 0, 0, 0}, s2[4] = {0, 0, 0, 0};
  for (int64_t o = 0; o < h.group; ++o)
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t row = (zk * h.group + o) * sq + i, global = h.first_q * sq + row;
      double keys = 0;
      for (int64_t kt = 0; kt < key_tiles; ++kt) keys += key_sums[row * key_tiles + kt];
      const double block = keys * q_norm2[global];
      for (int k = 0; k < 4; ++k) {
        const double e = d_err[k * rows_total + global], v = scale2 * (e * e) * block;
        s1[k] += v;
        s2[k] += v * v;
      }
    }
  const int64_t at = h.first_q / h.group + zk;
  for (int k = 0; k < 4; ++k) sum[at * 4 + k] = s1[k], sum_sq[at * 4 + k] = s2[k];
}

template <class G>
void product(const G& g, int64_t z_count) {
  launch_product<double, FusedMac>(g, z_count, false);
}

// An input: the mirror's float64 copy (oracles/device_mirror.h).
struct DeviceInput {
  SharedCopy copy;
  const double* get() const { return copy->doubles(); }
};

// Device arrays of the inputs and the results.
struct DeviceTerms {
  DeviceInput q, k, v, o, lse, d_out, d_lse;
  DeviceBuffer<double> operand[5], score[5], stored_dk, stored_dv, underflow_dk, underflow_dv, via_dq[4], via_dk[4];
  DeviceBuffer<double> d_minus_g, d_err, d_err_dq;  // d_err_dq: dQ's, with the tied keys' part (tied_key_errors)
  DeviceBuffer<uint8_t> tied;
  DeviceBuffer<double> operand_sources[5], score_sources[5];
  DeviceBuffer<double> subnormal[5], subnormal_sources[5];
  DeviceBuffer<double> q_norm2, k_norm2, v_norm2, d_out_norm2;
  DeviceBuffer<double> q_weighted, truncation_lse;  // the LSE's truncation part: Q by step weights, and the part
  // dK's via blocks: the chunk's key tile sums, every query row's column tile sums, the results.
  DeviceBuffer<double> key_sums, col_sums, via_tile_sum, via_tile_sum_sq, via_head_sum, via_head_sum_sq;
};

}  // namespace

void error_terms(const HostAttention& a, const double* o_host, const double* lse_host, const double* d_out_host, const double* d_lse_host,
                 const HostErrorTerms& out, Timing* timing) {
  if (a.heads_kv <= 0 || a.heads_q % a.heads_kv != 0) throw std::invalid_argument("heads_q must be a multiple of heads_kv");
  auto t0 = Clock::now();
  const int64_t group = a.heads_q / a.heads_kv, heads_total = a.batch * a.heads_q;
  const int64_t rows_q = heads_total * a.seq_q, rows_kv = a.batch * a.heads_kv * a.seq_kv;
  const auto n = [](int64_t x) { return static_cast<size_t>(x); };
  DeviceTerms d;
  auto upload = [&](DeviceInput& dst, const double* src, int64_t count) { dst.copy = device_copy(src, n(count)); };
  upload(d.q, a.q, rows_q * a.dim_qk);
  upload(d.k, a.k, rows_kv * a.dim_qk);
  upload(d.v, a.v, rows_kv * a.dim_v);
  upload(d.o, o_host, rows_q * a.dim_v);
  upload(d.lse, lse_host, rows_q);
  upload(d.d_out, d_out_host, rows_q * a.dim_v);
  upload(d.d_lse, d_lse_host, rows_q);
  const DeviceMask mask(a);
  const DeviceBias bias(a);
  const int64_t o_idx = 0, lse_idx = 1, dq_idx = 2, dk_idx = 3, dv_idx = 4;
  d.operand[o_idx] = DeviceBuffer<double>(n(rows_q * a.dim_v));
  d.score[o_idx] = DeviceBuffer<double>(n(rows_q * a.dim_v));
  d.score[lse_idx] = DeviceBuffer<double>(n(rows_q));
  d.operand[dq_idx] = DeviceBuffer<double>(n(rows_q * a.dim_qk));
  d.score[dq_idx] = DeviceBuffer<double>(n(rows_q * a.dim_qk));
  d.operand[dk_idx] = DeviceBuffer<double>(n(rows_kv * a.dim_qk));
  d.score[dk_idx] = DeviceBuffer<double>(n(rows_kv * a.dim_qk));
  d.operand[dv_idx] = DeviceBuffer<double>(n(rows_kv * a.dim_v));
  d.score[dv_idx] = DeviceBuffer<double>(n(rows_kv * a.dim_v));
  for (int k = 0; k < 4; ++k) {
    d.via_dq[k] = DeviceBuffer<double>(n(rows_q * a.dim_qk));
    d.via_dk[k] = DeviceBuffer<double>(n(rows_kv * a.dim_qk));
  }
  d.underflow_dk = DeviceBuffer<double>(n(rows_kv * a.dim_qk));
  d.underflow_dv = DeviceBuffer<double>(n(rows_kv * a.dim_v));
  if (group > 1) {
    d.stored_dk = DeviceBuffer<double>(n(rows_kv * a.dim_qk));
    d.stored_dv = DeviceBuffer<double>(n(rows_kv * a.dim_v));
  }
  for (int64_t x : {o_idx, dq_idx}) {
    d.operand_sources[x] = DeviceBuffer<double>(n(rows_q));
    d.score_sources[x] = DeviceBuffer<double>(n(rows_q));
  }
  const int64_t kv_rows = a.batch * a.heads_kv * a.seq_kv;
  for (int64_t x : {dk_idx, dv_idx}) {
    d.operand_sources[x] = DeviceBuffer<double>(n(kv_rows));
    d.score_sources[x] = DeviceBuffer<double>(n(kv_rows));
  }
  // The subnormal part (fp16 problems): computed where the caller asks for it.
  const bool subnormal = out.subnormal[o_idx] != nullptr;
  if (subnormal) {
    for (int64_t x : {o_idx, dq_idx}) {
      d.subnormal[x] = DeviceBuffer<double>(n(rows_q * (x == o_idx ? a.dim_v : a.dim_qk)));
      d.subnormal_sources[x] = DeviceBuffer<double>(n(rows_q));
    }
    for (int64_t x : {dk_idx, dv_idx}) {
      d.subnormal[x] = DeviceBuffer<double>(n(rows_kv * (x == dk_idx ? a.dim_qk : a.dim_v)));
      d.subnormal_sources[x] = DeviceBuffer<double>(n(kv_rows));
    }
  }
  d.q_norm2 = DeviceBuffer<double>(n(rows_q));
  d.d_out_norm2 = DeviceBuffer<double>(n(rows_q));
  d.k_norm2 = DeviceBuffer<double>(n(kv_rows));
  d.v_norm2 = DeviceBuffer<double>(n(kv_rows));
  row_norms2<<<grid_for(rows_q, 128), 128>>>(d.q.get(), d.q_norm2.get(), rows_q, a.dim_qk);
  row_norms2<<<grid_for(rows_q, 128), 128>>>(d.d_out.get(), d.d_out_norm2.get(), rows_q, a.dim_v);
  row_norms2<<<grid_for(kv_rows, 128), 128>>>(d.k.get(), d.k_norm2.get(), kv_rows, a.dim_qk);
  row_norms2<<<grid_for(kv_rows, 128), 128>>>(d.v.get(), d.v_norm2.get(), kv_rows, a.dim_v);
  AF_CUDA(cudaGetLastError());
  d.q_weighted = DeviceBuffer<double>(n(rows_q * a.dim_qk));
  d.truncation_lse = DeviceBuffer<double>(n(rows_q));
  step_weighted<<<grid_for(rows_q * a.dim_qk, kThreads), kThreads>>>(d.q.get(), d.q_weighted.get(), rows_q, a.dim_qk);
  AF_CUDA(cudaGetLastError());
  d.d_minus_g = DeviceBuffer<double>(n(rows_q));
  d.d_err = DeviceBuffer<double>(n(4 * rows_q));
  d.d_err_dq = DeviceBuffer<double>(n(4 * rows_q));
  // Per key-value head, whether its V rows (bit 0) or K rows (bit 1, not under a bias that varies
  // along the keys) are tied.
  {
    std::vector<uint8_t> tied(n(a.batch * a.heads_kv));
    const bool bias_varies_along_keys = a.bias != nullptr && a.bias_extent[3] != 1;
    for (int64_t x = 0; x < a.batch * a.heads_kv; ++x)
      tied[n(x)] = static_cast<uint8_t>((rows_tied(a.v + x * a.seq_kv * a.dim_v, a.seq_kv, a.dim_v) ? 1 : 0) |
                                        (!bias_varies_along_keys && rows_tied(a.k + x * a.seq_kv * a.dim_qk, a.seq_kv, a.dim_qk) ? 2 : 0));
    d.tied = DeviceBuffer<uint8_t>(tied.size());
    d.tied.upload(tied.data());
  }
  // dK's via blocks, where the caller asks for them.
  const bool via_blocks = out.via_tile_sum != nullptr && out.via_block_tile > 0;
  const int64_t block = std::max<int64_t>(1, out.via_block_tile), key_tiles = (a.seq_kv + block - 1) / block,
                col_tiles = (a.dim_qk + block - 1) / block, kv_heads_total = a.batch * a.heads_kv;
  if (via_blocks) {
    d.col_sums = DeviceBuffer<double>(n(rows_q * col_tiles));
    col_tile_sums<<<grid_for(rows_q * col_tiles, 128), 128>>>(d.q.get(), d.col_sums.get(), rows_q, a.dim_qk, block, col_tiles);
    AF_CUDA(cudaGetLastError());
    d.via_tile_sum = DeviceBuffer<double>(n(kv_heads_total * key_tiles * col_tiles * 4));
    d.via_tile_sum_sq = DeviceBuffer<double>(n(kv_heads_total * key_tiles * col_tiles * 4));
    d.via_head_sum = DeviceBuffer<double>(n(kv_heads_total * 4));
    d.via_head_sum_sq = DeviceBuffer<double>(n(kv_heads_total * 4));
  }
  double* via_dq[4] = {d.via_dq[0].get(), d.via_dq[1].get(), d.via_dq[2].get(), d.via_dq[3].get()};
  double* via_dk[4] = {d.via_dk[0].get(), d.via_dk[1].get(), d.via_dk[2].get(), d.via_dk[3].get()};
  DeviceBuffer<double*> via_dq_d(4), via_dk_d(4), one_out_d(11);
  via_dq_d.upload(via_dq);
  via_dk_d.upload(via_dk);
  // The single-array outputs of the column products: dK.operand, dK.score, dV.operand, dV.score, dK.stored, dV.stored,
  // dK.underflow, dV.underflow, dK.subnormal, dV.subnormal.
  double* const one_out[11] = {d.operand[dk_idx].get(),
                              d.score[dk_idx].get(),
                              d.operand[dv_idx].get(),
                              d.score[dv_idx].get(),
                              d.stored_dk.get(),
                              d.stored_dv.get(),
                              d.underflow_dk.get(),
                              d.underflow_dv.get(),
                              d.subnormal[dk_idx].get(),
                              d.subnormal[dv_idx].get(),
                              nullptr};
  one_out_d.upload(one_out);
  AF_CUDA(cudaDeviceSynchronize());
  if (timing) timing->upload_ms = ms_since(t0);
  t0 = Clock::now();

  // Query heads per chunk: whole groups, the Sq x Skv buffers within min(60% of free memory, 8 GiB).
  const bool capped = a.softcap.has_value();
  const int buffers = capped ? 6 : 5;
  size_t free_b = 0, total_b = 0;
  AF_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const double budget = std::min(static_cast<double>(free_b) * 0.6, 8.0 * (1ull << 30));
  const double per_group = static_cast<double>(buffers * group) * static_cast<double>(a.seq_q * a.seq_kv) * sizeof(double);
  const int64_t per_chunk = std::min<int64_t>({std::max<int64_t>(1, static_cast<int64_t>(budget / per_group)), a.batch * a.heads_kv,
                                               std::max<int64_t>(1, 65535 / group)}) *
                            group;
  const size_t plane = n(per_chunk * a.seq_q * a.seq_kv);
  ScoreBuffers s{scratch<double>(0, plane), scratch<double>(1, plane), nullptr,
                 scratch<double>(2, plane), scratch<double>(3, plane), scratch<double>(4, plane)};
  s.pc = capped ? scratch<double>(5, plane) : s.p;
  const MaskView m = mask.view();
  const double scale = a.scale, scale2 = a.scale * a.scale;
  const double o_length = static_cast<double>(a.seq_kv);
  for (int64_t first = 0; first < heads_total; first += per_chunk) {
    const int64_t heads = std::min(per_chunk, heads_total - first), kv_heads = heads / group;
    const int64_t row0 = first * a.seq_q, rows = heads * a.seq_q;
    const Heads h{first, group};
    const int elementwise_grid = grid_for(heads * a.seq_q * a.seq_kv, kThreads);
    // Scores, P, the sensitivity s.
    product(PairProduct{d.q.get(), d.k.get(), s.p, false, m, h, a.seq_q, a.seq_kv, a.dim_qk}, heads);
    product(PairProduct{d.q.get(), d.k.get(), s.sens, true, m, h, a.seq_q, a.seq_kv, a.dim_qk}, heads);
    score_terms<<<elementwise_grid, kThreads>>>(s, d.lse.get(), m, bias.view(), h, heads, scale, capped, a.softcap.value_or(1.0), a.dim_qk);
    AF_CUDA(cudaGetLastError());
    // The LSE's truncation part, through the dP buffer before dP is computed.
    product(PairProduct{d.q_weighted.get(), d.k.get(), s.ds, false, m, h, a.seq_q, a.seq_kv, a.dim_qk}, heads);
    lse_truncation<<<grid_for(rows * 32, 256), 256>>>(s, s.ds, d.truncation_lse.get(), h, heads, a.seq_q, a.seq_kv, scale);
    AF_CUDA(cudaGetLastError());
    // O and LSE.
    product(RowProduct{s, Factor::p2, d.v.get(), RowRhs::squared, a.dim_v, RowOut::root, 1.0, d.operand[o_idx].get(), nullptr, nullptr,
                       rows_q, m, h, a.seq_q, a.dim_v, a.seq_kv},
            heads);
    o_score_terms<<<dim3(static_cast<unsigned>((a.dim_v + 31) / 32), static_cast<unsigned>((a.seq_q + kScoreRows - 1) / kScoreRows),
                         static_cast<unsigned>(heads)),
                    dim3(32, kScoreRows)>>>(s, d.v.get(), d.o.get(), d.score[o_idx].get(), d.score[lse_idx].get(), m, h, a.dim_v);
    AF_CUDA(cudaGetLastError());
    row_errors<<<grid_for(rows, 128), 128>>>(d.d_out.get(), d.o.get(), d.operand[o_idx].get(), d.score[o_idx].get(), d.d_lse.get(),
                                             d.d_minus_g.get(), d.d_err.get(), row0, rows, rows_q, a.dim_v, o_length);
    AF_CUDA(cudaGetLastError());
    // dP, dS and what its rounding acts on.
    product(PairProduct{d.d_out.get(), d.v.get(), s.ds, false, m, h, a.seq_q, a.seq_kv, a.dim_v}, heads);
    product(PairProduct{d.d_out.get(), d.v.get(), s.wd, true, m, h, a.seq_q, a.seq_kv, a.dim_v}, heads);
    gradient_terms<<<elementwise_grid, kThreads>>>(s, d.d_minus_g.get(), m, h, heads, a.dim_v);
    AF_CUDA(cudaGetLastError());
    tied_key_errors<<<grid_for(rows, 128), 128>>>(s, d.d_out.get(), d.v.get(), d.tied.get(), d.d_err.get(), d.d_err_dq.get(), h, heads,
                                                  a.seq_q, a.seq_kv, a.dim_v, rows_q);
    AF_CUDA(cudaGetLastError());
    // dQ.
    product(RowProduct{s, Factor::ds2, d.k.get(), RowRhs::squared, a.dim_qk, RowOut::scaled_root, scale, d.operand[dq_idx].get(), nullptr,
                       nullptr, rows_q, m, h, a.seq_q, a.dim_qk, a.seq_kv},
            heads);
    product(RowProduct{s, Factor::wd2, d.k.get(), RowRhs::squared, a.dim_qk, RowOut::scaled_root, scale, d.score[dq_idx].get(), nullptr,
                       nullptr, rows_q, m, h, a.seq_q, a.dim_qk, a.seq_kv},
            heads);
    product(RowProduct{s, Factor::pc, d.k.get(), RowRhs::plain, a.dim_qk, RowOut::via, scale, nullptr, via_dq_d.get(), d.d_err_dq.get(),
                       rows_q, m, h, a.seq_q, a.dim_qk, a.seq_kv},
            heads);
    // dK and dV: sums over the group's heads.
    auto column = [&](Factor x, const double* y, ColRhs rhs, int64_t y_dim, bool square_each, double f, double* const* outs) {
      const int64_t cols = rhs == ColRhs::row_errors_squared ? 4 * y_dim : y_dim;
      product(ColumnProduct{s, x, y, rhs, y_dim, square_each, f, outs, d.d_err.get(), rows_q, m, h, a.seq_kv, cols, a.seq_q,
                            static_cast<int>(group)},
              kv_heads);
    };
    double* const* outs = one_out_d.get();
    column(Factor::ds2, d.q.get(), ColRhs::squared, a.dim_qk, false, scale2, outs + 0);
    column(Factor::wd2, d.q.get(), ColRhs::squared, a.dim_qk, false, scale2, outs + 1);
    column(Factor::pc2, d.q.get(), ColRhs::row_errors_squared, a.dim_qk, false, scale2, via_dk_d.get());
    if (via_blocks) {
      if (d.key_sums.size() < n(rows * key_tiles)) d.key_sums = DeviceBuffer<double>(n(per_chunk * a.seq_q * key_tiles));
      key_tile_sums<<<grid_for(rows * key_tiles, 128), 128>>>(s, d.key_sums.get(), rows, a.seq_kv, block, key_tiles);
      AF_CUDA(cudaGetLastError());
      via_tile_blocks<<<grid_for(kv_heads * key_tiles * col_tiles, 128), 128>>>(d.key_sums.get(), d.col_sums.get(), d.d_err.get(),
                                                                              d.via_tile_sum.get(), d.via_tile_sum_sq.get(), h, kv_heads,
                                                                              a.seq_q, key_tiles, col_tiles, rows_q, scale2);
      AF_CUDA(cudaGetLastError());
      via_head_blocks<<<grid_for(kv_heads, 64), 64>>>(d.key_sums.get(), d.q_norm2.get(), d.d_err.get(), d.via_head_sum.get(),
                                                      d.via_head_sum_sq.get(), h, kv_heads, a.seq_q, key_tiles, rows_q, scale2);
      AF_CUDA(cudaGetLastError());
    }
    column(Factor::p2, d.d_out.get(), ColRhs::squared, a.dim_v, false, 1.0, outs + 2);
    column(Factor::w2, d.d_out.get(), ColRhs::squared, a.dim_v, false, 1.0, outs + 3);
    column(Factor::abs_ds_flushed, d.q.get(), ColRhs::absolute, a.dim_qk, false, scale, outs + 6);
    column(Factor::p_flushed, d.d_out.get(), ColRhs::absolute, a.dim_v, false, 1.0, outs + 7);
    if (subnormal) {
      product(RowProduct{s, Factor::p_subnormal2, d.v.get(), RowRhs::squared, a.dim_v, RowOut::root, 1.0, d.subnormal[o_idx].get(),
                         nullptr, nullptr, rows_q, m, h, a.seq_q, a.dim_v, a.seq_kv},
              heads);
      product(RowProduct{s, Factor::ds_subnormal2, d.k.get(), RowRhs::squared, a.dim_qk, RowOut::scaled_root, scale,
                         d.subnormal[dq_idx].get(), nullptr, nullptr, rows_q, m, h, a.seq_q, a.dim_qk, a.seq_kv},
              heads);
      column(Factor::ds_subnormal2, d.q.get(), ColRhs::squared, a.dim_qk, false, scale2, outs + 8);
      column(Factor::p_subnormal2, d.d_out.get(), ColRhs::squared, a.dim_v, false, 1.0, outs + 9);
    }
    if (group > 1) {
      column(Factor::ds, d.q.get(), ColRhs::plain, a.dim_qk, true, scale2, outs + 4);
      column(Factor::p, d.d_out.get(), ColRhs::plain, a.dim_v, true, 1.0, outs + 5);
    }
    // The rows' sources.
    auto query_rows = [&](Factor f, const double* norms, DeviceBuffer<double>& out_buf) {
      query_row_sources<<<grid_for(rows * 32, 256), 256>>>(s, f, norms, out_buf.get(), h, heads, a.seq_q, a.seq_kv);
      AF_CUDA(cudaGetLastError());
    };
    auto key_rows = [&](Factor f, const double* norms, DeviceBuffer<double>& out_buf) {
      key_row_sources<<<grid_for(kv_heads * a.seq_kv, 128), 128>>>(s, f, norms, out_buf.get(), h, kv_heads, a.seq_q, a.seq_kv);
      AF_CUDA(cudaGetLastError());
    };
    query_rows(Factor::p2, d.v_norm2.get(), d.operand_sources[o_idx]);
    query_rows(Factor::w2, d.v_norm2.get(), d.score_sources[o_idx]);
    query_rows(Factor::ds2, d.k_norm2.get(), d.operand_sources[dq_idx]);
    query_rows(Factor::wd2, d.k_norm2.get(), d.score_sources[dq_idx]);
    key_rows(Factor::ds2, d.q_norm2.get(), d.operand_sources[dk_idx]);
    key_rows(Factor::wd2, d.q_norm2.get(), d.score_sources[dk_idx]);
    key_rows(Factor::p2, d.d_out_norm2.get(), d.operand_sources[dv_idx]);
    key_rows(Factor::w2, d.d_out_norm2.get(), d.score_sources[dv_idx]);
    if (subnormal) {
      query_rows(Factor::p_subnormal2, d.v_norm2.get(), d.subnormal_sources[o_idx]);
      query_rows(Factor::ds_subnormal2, d.k_norm2.get(), d.subnormal_sources[dq_idx]);
      key_rows(Factor::ds_subnormal2, d.q_norm2.get(), d.subnormal_sources[dk_idx]);
      key_rows(Factor::p_subnormal2, d.d_out_norm2.get(), d.subnormal_sources[dv_idx]);
    }
  }
  AF_CUDA(cudaDeviceSynchronize());
  if (timing) timing->compute_ms = ms_since(t0);
  t0 = Clock::now();
  for (int x = 0; x < 5; ++x) {
    if (out.operand[x] && d.operand[x].size()) d.operand[x].download(out.operand[x]);
    if (out.score[x] && d.score[x].size()) d.score[x].download(out.score[x]);
  }
  for (int x = 0; x < 5; ++x) {
    if (out.operand_sources[x] && d.operand_sources[x].size()) d.operand_sources[x].download(out.operand_sources[x]);
    if (out.score_sources[x] && d.score_sources[x].size()) d.score_sources[x].download(out.score_sources[x]);
  }
  for (int k = 0; k < 4; ++k) {
    if (out.via_dq[k]) d.via_dq[k].download(out.via_dq[k]);
    if (out.via_dk[k]) d.via_dk[k].download(out.via_dk[k]);
  }
  if (subnormal)
    for (int x = 0; x < 5; ++x) {
      if (out.subnormal[x] && d.subnormal[x].size()) d.subnormal[x].download(out.subnormal[x]);
      if (out.subnormal_sources[x] && d.subnormal_sources[x].size()) d.subnormal_sources[x].download(out.subnormal_sources[x]);
    }
  if (via_blocks) {
    d.via_tile_sum.download(out.via_tile_sum);
    d.via_tile_sum_sq.download(out.via_tile_sum_sq);
    d.via_head_sum.download(out.via_head_sum);
    d.via_head_sum_sq.download(out.via_head_sum_sq);
  }
  if (out.truncation_lse) d.truncation_lse.download(out.truncation_lse);
  if (out.underflow_dk) d.underflow_dk.download(out.underflow_dk);
  if (out.underflow_dv) d.underflow_dv.download(out.underflow_dv);
  if (group > 1) {
    if (out.stored_dk) d.stored_dk.download(out.stored_dk);
    if (out.stored_dv) d.stored_dv.download(out.stored_dv);
  }
  if (timing) timing->download_ms = ms_since(t0);
}

}  // namespace attnfuzz::gpu
