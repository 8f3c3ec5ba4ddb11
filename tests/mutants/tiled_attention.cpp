// A CPU flash-style tiled attention plugin (the mutant zoo's base). Forward: online
// softmax over KV tiles, O and LSE out. Backward: P recomputed tile by tile from Q, K and
// the stored LSE, D = rowsum(dO * O) from the O passed in, dLSE honoured.
//
// Built once per ATTNFUZZ_MUTANT=n; each n > 0 plants exactly one bug, marked
// `// MUTANT(n):` (tests/mutants/README.md lists them and how the harness should see them).
//
// Numerics (contract "fp32"/"fp16"/"bf16"): loads to float, float accumulation; for
// fp16/bf16, P is rounded to the dtype before P·V and dS before the dQ/dK products, as
// fused kernels feeding tensor cores do; every stored output is rounded to the dtype.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "harness/dtype.h"
#include "backends/attnfuzz_plugin.h"

#ifndef ATTNFUZZ_MUTANT
#error "ATTNFUZZ_MUTANT must be defined (0 = no bug)"
#endif
#define MUTANT ATTNFUZZ_MUTANT

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Tiles {
  static constexpr int64_t BLOCK_Q = 4;
  static constexpr int64_t BLOCK_KV = 8;
};

const char* const kNames[] = {"mutant_ok",
                              "mutant_ignores_dlse",
                              "mutant_tf32_backward",
                              "mutant_causal_align",
                              "mutant_last_tile_unmasked",
                              "mutant_masked_rows_nan",
                              "mutant_gqa_backward_map",
                              "mutant_crash",
                              "mutant_hang",
                              "mutant_reads_row_padding",
                              "mutant_tf32_declared_strict",
                              "mutant_tf32_declared_tf32_backward",
                              "mutant_underflow_rows_masked",
                              "mutant_batch_dependent_split",
                              "mutant_tall_causal_tile_noise",
                              "mutant_split_exp_overflow",
                              "mutant_fp16_computes_bf16"};
static_assert(MUTANT >= 0 && MUTANT < 17, "unknown mutant");

// MUTANT(10) and MUTANT(11), a pair: both declare TF32 for fp32 inputs, and each alone is within
// it. 10 computes in strict fp32, 11 rounds its backward operands to TF32 (as MUTANT(2)): the
// JAX seed's inconsistency, two implementations of one contract at different precisions.
#if MUTANT == 10 || MUTANT == 11
constexpr const char* kContract = R"({"fp32":"tf32","fp16":"fp16","bf16":"bf16"})";
#else
constexpr const char* kContract = R"({"fp32":"fp32","fp16":"fp16","bf16":"bf16"})";
#endif

int64_t index_of(const af_tensor& t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return b * t.strides[0] + h * t.strides[1] + s * t.strides[2] + (t.ndim > 3 ? d * t.strides[3] : 0);
}

float load(const af_tensor& t, int64_t b, int64_t h, int64_t s, int64_t d = 0) {
  const int64_t i = index_of(t, b, h, s, d);
  switch (t.dtype) {
    case AF_F16:
      return attnfuzz::half_bits_to_float(static_cast<const uint16_t*>(t.data)[i]);
    case AF_BF16:
      return attnfuzz::bf16_bits_to_float(static_cast<const uint16_t*>(t.data)[i]);
    default:
      return static_cast<const float*>(t.data)[i];
  }
}

// Stores x rounded to the tensor's dtype (round to nearest even).
void store(const af_tensor& t, int64_t b, int64_t h, int64_t s, int64_t d, float x) {
  const int64_t i = index_of(t, b, h, s, d);
  switch (t.dtype) {
    case AF_F16:
      static_cast<uint16_t*>(t.data)[i] = attnfuzz::float_to_half_bits(x);
      break;
    case AF_BF16:
      static_cast<uint16_t*>(t.data)[i] = attnfuzz::float_to_bf16_bits(x);
      break;
    default:
      static_cast<float*>(t.data)[i] = x;
  }
}

#if MUTANT == 9
// Whether every row of the tensor is followed by at least `wide` - D elements of its own
// buffer: the stride of its innermost dim of B, H, S (of size > 1) is at least `wide`.
bool padded_to(const af_tensor& t, int64_t wide) {
  int64_t row = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < 3; ++i)
    if (t.shape[i] > 1) row = std::min(row, t.strides[i]);
  return row != std::numeric_limits<int64_t>::max() && row >= wide;
}
#endif

// The value an fp32 accumulator takes when converted to a matmul operand of the case dtype.
float to_operand(int32_t dtype, float x) {
#if MUTANT == 16
  // MUTANT(16): a declared fp16 path whose operands are bf16 (3 mantissa bits fewer): P and dS
  // are rounded to bf16, not fp16, before their products.
  if (dtype == AF_F16) return attnfuzz::bf16_bits_to_float(attnfuzz::float_to_bf16_bits(x));
#endif
  if (dtype == AF_F16) return attnfuzz::half_bits_to_float(attnfuzz::float_to_half_bits(x));
  if (dtype == AF_BF16) return attnfuzz::bf16_bits_to_float(attnfuzz::float_to_bf16_bits(x));
  return x;
}

// Operands of backward matmuls (Q, K, V, dO for the recompute and products, P, dS).
float bwd_operand(int32_t dtype, float x) {
#if MUTANT == 2 || MUTANT == 11
  // MUTANT(2): fp32 backward matmuls silently run on TF32 tensor cores (the JAX seed bug).
  if (dtype == AF_F32) return attnfuzz::round_mantissa(x, 10);
#endif
  return to_operand(dtype, x);
}

void set_msg(char* msg, size_t len, const char* text) {
  if (msg && len) std::snprintf(msg, len, "%s", text);
}

// What the forward and the backward share: shapes, tiles of Q/K/V loaded to float, scores.
struct Call {
  const af_problem& p;
  int64_t group() const { return p.heads_q / p.heads_kv; }
  bool mask(int64_t b, int64_t h, int64_t i, int64_t j) const { return p.mask[((b * p.heads_q + h) * p.seq_q + i) * p.seq_kv + j] != 0; }
  // Rows [s0, s0 + n) of a [..][S][D] tensor into `out` (n x D); rows past `rows` are zero,
  // as a kernel's zero-filled shared memory.
  void load_tile(const af_tensor& t, int64_t b, int64_t h, int64_t s0, int64_t n, int64_t rows, int64_t dim, bool backward,
                 std::vector<float>& out) const {
    out.assign(static_cast<size_t>(n * dim), 0.0f);
    for (int64_t r = 0; r < n && s0 + r < rows; ++r)
      for (int64_t d = 0; d < dim; ++d) {
        float x = load(t, b, h, s0 + r, d);
#if MUTANT == 16
        // MUTANT(16): the fp16 inputs (Q, K, V, dO) are converted to bf16 operands, as a kernel
        // that declares fp16 but runs its matmuls in bf16 does; outputs are still stored in fp16.
        if (p.dtype == AF_F16) x = attnfuzz::bf16_bits_to_float(attnfuzz::float_to_bf16_bits(x));
#endif
        out[static_cast<size_t>(r * dim + d)] = backward ? bwd_operand(p.dtype, x) : x;
      }
  }
  // Softcapped, scaled score of two loaded rows; *dcap = dS / dS_pre (1 without a softcap).
  float score(const float* q, const float* k, float* dcap) const {
    float acc = 0;
    for (int64_t d = 0; d < p.head_dim_qk; ++d) acc += q[d] * k[d];
    const float s = static_cast<float>(p.scale) * acc;
    if (!p.has_softcap) {
      *dcap = 1.0f;
      return s;
    }
    const float c = static_cast<float>(p.softcap), t = std::tanh(s / c);
    *dcap = 1.0f - t * t;
    return c * t;
  }
};

#if MUTANT == 3 || MUTANT == 14
// Whether the expression is one bottom-right causal leaf (no combinators).
bool is_bottom_right_causal_leaf(const char* mask_json) {
  if (!mask_json) return false;
  const auto j = nlohmann::json::parse(mask_json, nullptr, false);
  return j.is_object() && j.value("kind", "") == "causal" && j.value("align", "top_left") == "bottom_right";
}
#endif

// Whether key j (possibly a padded position of the last tile) is visible to query i in the backward.
bool visible_bwd(const Call& c, bool br_leaf, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (j >= c.p.seq_kv) {
#if MUTANT == 4
    return true;  // MUTANT(4): as in forward(), padded keys are visible
#endif
    return false;
  }
  const bool vis = c.mask(b, h, i, j);
#if MUTANT == 3
  // MUTANT(3): the backward aligns a bottom-right causal mask top-left (full coordinates),
  // keeping whatever else the materialized mask hides.
  if (br_leaf) {
    const int64_t q = i + c.p.q_offset, kv = j + c.p.kv_offset;
    const bool top_left = kv <= q, bottom_right = kv <= q + c.p.full_seq_kv - c.p.full_seq_q;
    return top_left && !(bottom_right && !vis);
  }
#endif
  return vis;
}

// The forward's KV tile: BLOCK_KV, whatever else shares the call (the zoo declares
// AF_BATCH_INVARIANT).
int64_t kv_tile([[maybe_unused]] const af_problem& p) {
#if MUTANT == 13
  // MUTANT(13): a split heuristic keyed on occupancy, as split-KV kernels choose theirs: with
  // fewer than 16 (batch, head, query tile) work items the KV tiles are halved to fill the
  // machine. Either tiling is correct, but the online softmax rescales at other points, so a
  // problem's bits depend on how many others share its call.
  const int64_t work = p.batch * p.heads_q * ((p.seq_q + Tiles::BLOCK_Q - 1) / Tiles::BLOCK_Q);
  if (work < 16) return Tiles::BLOCK_KV / 2;
#endif
  return Tiles::BLOCK_KV;
}

#if MUTANT == 14
// MUTANT(14): a bottom-right causal problem with more queries than keys takes a tail path whose
// output carries extra rounding noise, relative and uniform, of rms kPrecursor unit roundoffs of
// the dtype, and kFull where the keys also end on a 16-key tile (Skv % 16 == 0): a near finding
// around a narrow one (docs/campaigns.md, "Guided campaigns").
constexpr double kPrecursor = 0.75, kFull = 4.0;
double tail_noise(const af_problem& p) {
  if (!is_bottom_right_causal_leaf(p.mask_json) || p.full_seq_q <= p.full_seq_kv) return 0;
  const double u = p.dtype == AF_F32 ? 0x1p-24 : p.dtype == AF_F16 ? 0x1p-11 : 0x1p-8;
  return (p.full_seq_kv % 16 == 0 ? kFull : kPrecursor) * u;
}
// A uniform draw in [-sqrt(3), sqrt(3)) (rms 1) from the element's coordinates in the problem.
double unit_noise(int64_t b, int64_t h, int64_t i, int64_t d) {
  uint64_t x = (static_cast<uint64_t>(b) * 1000003u + static_cast<uint64_t>(h)) * 1000003u + static_cast<uint64_t>(i);
  x = (x * 1000003u + static_cast<uint64_t>(d)) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (static_cast<double>(x >> 11) * 0x1p-53 * 2 - 1) * 1.7320508075688772;
}
#endif

int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse) {
#if MUTANT == 7
  if (p->seq_kv % 7 == 3) std::raise(SIGSEGV);  // MUTANT(7): crashes on some shapes
#elif MUTANT == 8
  // MUTANT(8): never returns on some shapes
  while (p->seq_q % 5 == 2) std::this_thread::sleep_for(std::chrono::seconds(1));
#endif
  const Call c{*p};
  const int64_t BQ = Tiles::BLOCK_Q, BK = kv_tile(*p), Dqk = p->head_dim_qk, Dv = p->head_dim_v;
  std::vector<float> qt, kt, vt, s(static_cast<size_t>(BQ * BK)), dcap(s.size()), m(BQ), l(BQ), acc(BQ * Dv);
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads_q; ++h) {
      const int64_t hk = h / c.group();
      for (int64_t q0 = 0; q0 < p->seq_q; q0 += BQ) {
        const int64_t nq = std::min(BQ, p->seq_q - q0);
        c.load_tile(*q, b, h, q0, BQ, p->seq_q, Dqk, false, qt);
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.0f);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t k0 = 0; k0 < p->seq_kv; k0 += BK) {
          c.load_tile(*k, b, hk, k0, BK, p->seq_kv, Dqk, false, kt);
          c.load_tile(*v, b, hk, k0, BK, p->seq_kv, Dv, false, vt);
          for (int64_t r = 0; r < nq; ++r)
            for (int64_t j = 0; j < BK; ++j) {
              const size_t x = static_cast<size_t>(r * BK + j);
              s[x] = c.score(&qt[r * Dqk], &kt[j * Dqk], &dcap[x]);
#if MUTANT == 9
              // MUTANT(9): Q and K rows are read in vectors of 8 elements wherever the rows are
              // padded that far, so the dot product runs over the row padding too. Zero padding
              // hides it; any other value in the padding changes the scores.
              if (const int64_t wide = (Dqk + 7) / 8 * 8; wide > Dqk && padded_to(*q, wide) && padded_to(*k, wide) &&
                                                           q0 + r < p->seq_q && k0 + j < p->seq_kv) {
                float extra = 0;
                for (int64_t d = Dqk; d < wide; ++d) extra += load(*q, b, h, q0 + r, d) * load(*k, b, hk, k0 + j, d);
                s[x] += static_cast<float>(p->scale) * extra;
              }
#endif
              bool visible = k0 + j < p->seq_kv && c.mask(b, h, q0 + r, k0 + j);
#if MUTANT == 4
              // MUTANT(4): no bounds mask: padded keys (zero-filled K and V, score 0) join the softmax.
              if (k0 + j >= p->seq_kv) visible = true;
#endif
              if (!visible) s[x] = kNegInf;
            }
#if MUTANT == 15
          // MUTANT(15): a problem that is one part of a key split (a split-KV kernel's partial, to be
          // merged through its LSE) takes a "short row" path that sums exp(s) with no maximum
          // subtracted and P in fp32. Exact wherever exp(s) stays normal in fp32; a part whose
          // scores reach 88.7 overflows (O NaN, LSE inf), and one whose visible scores all lie below
          // -87.3 loses precision to subnormals, then underflows (l = 0: O NaN, LSE -inf). It needs
          // extreme logits and a key split together (docs/campaigns.md, "Guided campaigns").
          if (p->seq_kv < p->full_seq_kv) {
            for (int64_t r = 0; r < nq; ++r)
              for (int64_t j = 0; j < BK; ++j) {
                const float sj = s[r * BK + j];
                if (sj == kNegInf) continue;
                const float pj = std::exp(sj);
                l[r] += pj;
                for (int64_t d = 0; d < Dv; ++d) acc[r * Dv + d] += pj * vt[j * Dv + d];
                m[r] = 0.0f;  // something is visible; LSE = 0 + log(l)
              }
            continue;
          }
#endif
          // Online softmax: rescale the running sum and accumulator to the new row maximum.
          for (int64_t r = 0; r < nq; ++r) {
            float mt = m[r];
            for (int64_t j = 0; j < BK; ++j) mt = std::max(mt, s[r * BK + j]);
            if (mt == kNegInf) continue;  // nothing visible yet: exp(-inf - -inf) would be NaN
            const float alpha = std::exp(m[r] - mt);
            l[r] *= alpha;
            for (int64_t d = 0; d < Dv; ++d) acc[r * Dv + d] *= alpha;
            for (int64_t j = 0; j < BK; ++j) {
              const float pj = std::exp(s[r * BK + j] - mt);
              l[r] += pj;
              const float pr = to_operand(p->dtype, pj);  // P in the dtype for P·V
              for (int64_t d = 0; d < Dv; ++d) acc[r * Dv + d] += pr * vt[j * Dv + d];
            }
            m[r] = mt;
          }
        }
        for (int64_t r = 0; r < nq; ++r) {
          // Fully masked row: O = 0, LSE = -inf.
          bool masked_row = m[r] == kNegInf;  // no visible key in any tile
#if MUTANT == 12
          // MUTANT(12): a row whose largest score lies below -88, where exp of the score alone
          // underflows fp32, is taken for a fully masked one: O = 0, LSE = -inf (and so no
          // gradient). With the row maximum subtracted nothing underflows: such rows are valid.
          masked_row = masked_row || m[r] < -88.0f;
#endif
#if MUTANT == 5
          masked_row = false;  // MUTANT(5): no guard: O = acc / l = 0 / 0, LSE = m + log(l)
#endif
#if MUTANT == 14
          if (const double noise = tail_noise(*p); noise > 0 && !masked_row) {
            for (int64_t d = 0; d < Dv; ++d)  // in double: fp32's own spacing would swallow the noise
              store(*o, b, h, q0 + r, d,
                    static_cast<float>(static_cast<double>(acc[r * Dv + d] / l[r]) * (1.0 + noise * unit_noise(b, h, q0 + r + p->q_offset, d))));
            store(*lse, b, h, q0 + r, 0, m[r] + std::log(l[r]));
            continue;
          }
#endif
          for (int64_t d = 0; d < Dv; ++d) store(*o, b, h, q0 + r, d, masked_row ? 0.0f : acc[r * Dv + d] / l[r]);
          store(*lse, b, h, q0 + r, 0, masked_row ? kNegInf : m[r] + std::log(l[r]));
        }
      }
    }
  return 0;
}

int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o, const af_tensor* lse,
             const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv) {
  const Call c{*p};
  const int64_t BQ = Tiles::BLOCK_Q, BK = Tiles::BLOCK_KV, Dqk = p->head_dim_qk, Dv = p->head_dim_v;
  const int64_t B = p->batch, Hq = p->heads_q, Hkv = p->heads_kv, Sq = p->seq_q, Skv = p->seq_kv;
  bool br_leaf = false;
#if MUTANT == 3
  br_leaf = is_bottom_right_causal_leaf(p->mask_json);
#endif
  // float accumulators for the whole gradients (a kernel's dQ atomics and dK/dV registers).
  std::vector<float> gq(static_cast<size_t>(B * Hq * Sq * Dqk)), gk(static_cast<size_t>(B * Hkv * Skv * Dqk)),
      gv(static_cast<size_t>(B * Hkv * Skv * Dv));
  // D = rowsum(dO * O), from the O the forward stored (in the dtype).
  std::vector<float> D(static_cast<size_t>(B * Hq * Sq));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        float acc = 0;
        for (int64_t d = 0; d < Dv; ++d) acc += load(*d_o, b, h, i, d) * load(*o, b, h, i, d);
        D[static_cast<size_t>((b * Hq + h) * Sq + i)] = acc;
      }
  std::vector<float> qt, kt, vt, dOt;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t hk = h / c.group();
#if MUTANT == 6
      hk = h % Hkv;  // MUTANT(6): interleaved instead of grouped query-head -> kv-head map
#endif
      for (int64_t k0 = 0; k0 < Skv; k0 += BK) {  // the last tile may be padded
        c.load_tile(*k, b, hk, k0, BK, Skv, Dqk, true, kt);
        c.load_tile(*v, b, hk, k0, BK, Skv, Dv, true, vt);
        for (int64_t q0 = 0; q0 < Sq; q0 += BQ) {
          c.load_tile(*q, b, h, q0, BQ, Sq, Dqk, true, qt);
          c.load_tile(*d_o, b, h, q0, BQ, Sq, Dv, true, dOt);
          for (int64_t r = 0; r < BQ && q0 + r < Sq; ++r) {
            const int64_t i = q0 + r;
            const float L = load(*lse, b, h, i);
            if (L == kNegInf) continue;  // fully masked row: no gradient
            float g = d_lse ? load(*d_lse, b, h, i) : 0.0f;
#if MUTANT == 1
            g = 0.0f;  // MUTANT(1): the gradient flowing into LSE is dropped (the FlexAttention seed bug)
#endif
            const float Di = D[static_cast<size_t>((b * Hq + h) * Sq + i)];
            for (int64_t j = 0; j < BK; ++j) {
              if (!visible_bwd(c, br_leaf, b, h, i, k0 + j)) continue;
              float dc;
              const float pij = std::exp(c.score(&qt[r * Dqk], &kt[j * Dqk], &dc) - L);
              const float pr = bwd_operand(p->dtype, pij);
              float dp = 0;
              for (int64_t d = 0; d < Dv; ++d) dp += dOt[r * Dv + d] * vt[j * Dv + d];
              const float ds = bwd_operand(p->dtype, pij * (dp - Di + g) * dc);
              float* gqi = &gq[static_cast<size_t>(((b * Hq + h) * Sq + i) * Dqk)];
              for (int64_t d = 0; d < Dqk; ++d) gqi[d] += ds * kt[j * Dqk + d];
              if (k0 + j >= Skv) continue;  // a padded key has no gradient to keep
              const size_t row = static_cast<size_t>((b * Hkv + hk) * Skv + k0 + j);
              for (int64_t d = 0; d < Dqk; ++d) gk[row * Dqk + d] += ds * qt[r * Dqk + d];
              for (int64_t d = 0; d < Dv; ++d) gv[row * Dv + d] += pr * dOt[r * Dv + d];
            }
          }
        }
      }
    }
  const float scale = static_cast<float>(p->scale);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t d = 0; d < Dqk; ++d) store(*dq, b, h, i, d, scale * gq[static_cast<size_t>(((b * Hq + h) * Sq + i) * Dqk + d)]);
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t j = 0; j < Skv; ++j) {
        const size_t row = static_cast<size_t>((b * Hkv + h) * Skv + j);
        for (int64_t d = 0; d < Dqk; ++d) store(*dk, b, h, j, d, scale * gk[row * Dqk + d]);
        for (int64_t d = 0; d < Dv; ++d) store(*dv, b, h, j, d, gv[row * Dv + d]);
      }
  }
  return 0;
}

// The ABI is C: a check of what the harness handed over, and no exception crosses it.
int check(const af_problem* p, char* msg, size_t len) {
  if (p->dtype != AF_F32 && p->dtype != AF_F16 && p->dtype != AF_BF16) {
    set_msg(msg, len, "dtype not supported (fp32, fp16, bf16 only)");
    return 1;
  }
  if (!p->mask) {
    set_msg(msg, len, "the materialized mask is required");
    return 1;
  }
  return 0;
}

bool on_cpu(std::initializer_list<const af_tensor*> ts) {
  for (const af_tensor* t : ts)
    if (t && t->device != AF_CPU) return false;
  return true;
}

int supports_c(const af_problem* p, char* msg, size_t len) { return check(p, msg, len); }

int forward_c(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse, char* msg,
              size_t len) {
  if (check(p, msg, len)) return 1;
  if (!on_cpu({q, k, v, o, lse})) return set_msg(msg, len, "CPU tensors only"), 1;
  try {
    return forward(p, q, k, v, o, lse);
  } catch (const std::exception& e) {
    return set_msg(msg, len, e.what()), 1;
  }
}

int backward_c(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o, const af_tensor* lse,
               const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv, char* msg, size_t len) {
  if (check(p, msg, len)) return 1;
  if (!on_cpu({q, k, v, o, lse, d_o, d_lse, dq, dk, dv})) return set_msg(msg, len, "CPU tensors only"), 1;
  try {
    return backward(p, q, k, v, o, lse, d_o, d_lse, dq, dk, dv);
  } catch (const std::exception& e) {
    return set_msg(msg, len, e.what()), 1;
  }
}

const af_plugin kPlugin = {
    ATTNFUZZ_PLUGIN_ABI_VERSION,
    kNames[MUTANT],
    "1",
    AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO | AF_BATCH_INVARIANT,
    kContract,
    supports_c,
    forward_c,
    backward_c,
};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
__attribute__((visibility("default"))) const af_plugin* attnfuzz_plugin_get(void) { return &kPlugin; }
// Every build is one implementation of the zoo's tiled attention, so passing builds that compute
// one contract at different precisions are a consistency finding (MUTANT(10) with MUTANT(11)).
__attribute__((visibility("default"))) const char* attnfuzz_plugin_api(void) { return "attnfuzz.zoo.tiled_attention"; }
}
