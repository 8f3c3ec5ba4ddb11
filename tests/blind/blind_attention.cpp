// The held-out zoo's kernel (tests/blind/README.md): a CPU attention plugin written apart
// from tests/mutants/tiled_attention.cpp, so the harness is measured on code it was not
// tuned on. Built once per BLIND_BUG=n; each n > 0 plants one bug, marked `// BUG(n):`.
//
// Forward: FlashAttention-2 style, tiles of 16 queries x 32 keys, the online softmax in
// base 2 (scores times log2(e), exp2), O = acc / l and LSE = (m2 + log2 l) ln 2 at the end.
// Backward: outer loop over key tiles of 32 of one kv head, then the query heads of its group,
// then query tiles of 16; dK and dV in per-tile accumulators, dQ in a float buffer for the
// whole call; D = rowsum(dO * O) in a separate pre-pass, as kernels do.
// Masks: a lone `causal` or `sliding_window` leaf (no restrictions) is computed natively
// from mask_json and the call's offsets; anything else reads the materialized mask.
// Numerics (contract fp32/fp16/bf16): float loads and accumulation; for fp16/bf16 P and dS
// are rounded to the dtype before their products; outputs stored round-to-nearest-even.
// fp16/bf16 conversions are this file's own (no harness code is linked in).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/attnfuzz_plugin.h"

#ifndef BLIND_BUG
#error "BLIND_BUG must be defined (0 = no bug)"
#endif

namespace {

#ifndef BLIND_TILE_KV
#define BLIND_TILE_KV 32  // GPU kernels use 64 or 128: the reach experiment of the README builds one
#endif
constexpr int64_t kTileQ = 16, kTileKv = BLIND_TILE_KV;
constexpr float kLog2e = 1.44269504088896341f;
[[maybe_unused]] constexpr float kLn2 = 0.693147180559945309f;  // unused when BLIND_BUG keeps the LSE in log2
constexpr float kNegInf = -INFINITY;

const char* const kNames[] = {"blind_ok",           "blind_lse_log2",         "blind_softcap_no_chain", "blind_rescale_skip_acc",
                              "blind_dq_last_qtile", "blind_dk_no_scale",      "blind_dlse_sign",        "blind_window_edge",
                              "blind_gqa_dv_one_head", "blind_do_row_padding", "blind_l_from_rounded_p", "blind_o_round_toward_zero",
                              "blind_masked_lse_zero", "blind_causal_kv_offset", "blind_dq_acc_uninitialized", "blind_scale_in_dtype"};
static_assert(BLIND_BUG >= 0 && BLIND_BUG < 16, "unknown bug");

// ---- 16-bit floats -------------------------------------------------------------------

float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f, bool toward_zero) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  if (!toward_zero) u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (inf stays inf)
  return static_cast<uint16_t>(u >> 16);
}

float half_to_float(uint16_t h) {
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(m | 0x400), e - 25);
}

// Rounds |f| onto the fp16 grid (spacing 2^(e-10), subnormals 2^-24), then encodes it.
uint16_t float_to_half(float f, bool toward_zero) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7e00;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(f)) return sign | 0x7c00;
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const double spacing = std::ldexp(1.0, std::max(e - 1, -14) - 10);
  double r = (toward_zero ? std::trunc(a / spacing) : std::nearbyint(a / spacing)) * spacing;
  if (r > 65504.0) {
    if (toward_zero) r = 65504.0;
    else return sign | 0x7c00;
  }
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(r / std::ldexp(1.0, -24));
  int re;
  const double frac = std::frexp(r, &re);  // r = frac 2^re, frac in [0.5, 1)
  return sign | static_cast<uint16_t>(((re - 1 + 15) << 10) | (static_cast<int>(frac * 2048.0) & 0x3ff));
}

// ---- tensors --------------------------------------------------------------------------

struct Strided {
  const af_tensor* t;
  int64_t sb, sh, ss;  // element strides of B, H, S (D is 1)
  explicit Strided(const af_tensor* x) : t(x), sb(x->strides[0]), sh(x->strides[1]), ss(x->strides[2]) {}
  int64_t at(int64_t b, int64_t h, int64_t s, int64_t d) const { return b * sb + h * sh + s * ss + (t->ndim == 4 ? d : 0); }
  float get(int64_t b, int64_t h, int64_t s, int64_t d = 0) const {
    const int64_t i = at(b, h, s, d);
    if (t->dtype == AF_F16) return half_to_float(static_cast<const uint16_t*>(t->data)[i]);
    if (t->dtype == AF_BF16) return bf16_to_float(static_cast<const uint16_t*>(t->data)[i]);
    return static_cast<const float*>(t->data)[i];
  }
  void put(int64_t b, int64_t h, int64_t s, int64_t d, float x, bool toward_zero = false) const {
    const int64_t i = at(b, h, s, d);
    if (t->dtype == AF_F16) static_cast<uint16_t*>(t->data)[i] = float_to_half(x, toward_zero);
    else if (t->dtype == AF_BF16) static_cast<uint16_t*>(t->data)[i] = float_to_bf16(x, toward_zero);
    else static_cast<float*>(t->data)[i] = x;
  }
};

#if BLIND_BUG == 9
// BUG(9): the backward's dO loads assume dense D-vectors: the innermost of the B, H, S
// strides is taken to be Dv, dropping the row padding (the D . dO pre-pass reads it right).
Strided dense_rows(const af_tensor* x) {
  Strided s(x);
  int64_t* inner = &s.ss;
  if (s.sh < *inner && x->shape[1] > 1) inner = &s.sh;
  if (s.sb < *inner && x->shape[0] > 1) inner = &s.sb;
  *inner = x->shape[3];
  return s;
}
#endif

// A matmul operand of the case dtype made from a float (P, dS).
float operand(int32_t dtype, float x) {
  if (dtype == AF_F16) return half_to_float(float_to_half(x, false));
  if (dtype == AF_BF16) return bf16_to_float(float_to_bf16(x, false));
  return x;
}

// The softmax scale as the kernel holds it.
float softmax_scale(const af_problem& p) {
#if BLIND_BUG == 15
  return operand(p.dtype, static_cast<float>(p.scale));  // BUG(15): the scale is passed in the input dtype
#else
  return static_cast<float>(p.scale);
#endif
}

// ---- the mask -------------------------------------------------------------------------

// A lone causal / sliding-window leaf, evaluated natively in the full problem's coordinates.
struct NativeMask {
  bool active = false;
  int64_t left = -1, right = 0;  // causal: left = -1 (unbounded), right = 0
  bool bottom_right = false;
};

NativeMask native_mask(const af_problem& p) {
  NativeMask n;
  if (!p.mask_json) return n;
  const std::string restr = p.restrictions_json ? p.restrictions_json : "[]";
  if (restr.find('{') != std::string::npos) return n;  // bands: use the materialized mask
  const auto j = nlohmann::json::parse(p.mask_json, nullptr, false);
  if (!j.is_object()) return n;
  const std::string kind = j.value("kind", "");
  n.bottom_right = j.value("align", "top_left") == "bottom_right";
  if (kind == "causal") n.active = true;
  if (kind == "sliding_window") {
    n.active = true;
    n.left = j.value("left", int64_t{-1});
    n.right = j.value("right", int64_t{-1});
  }
  return n;
}

struct Visibility {
  const af_problem& p;
  NativeMask n;
  bool operator()(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (!n.active) return p.mask[((b * p.heads_q + h) * p.seq_q + i) * p.seq_kv + j] != 0;
    const int64_t q = i + p.q_offset + (n.bottom_right ? p.full_seq_kv - p.full_seq_q : 0);
    int64_t kv = j + p.kv_offset;
#if BLIND_BUG == 13
    kv = j;  // BUG(13): the key's offset in the whole problem is forgotten (parts of a key split)
#endif
#if BLIND_BUG == 7
    if (n.left >= 0 && kv <= q - n.left) return false;  // BUG(7): the window's left edge key is dropped
#else
    if (n.left >= 0 && kv < q - n.left) return false;
#endif
    return n.right < 0 || kv <= q + n.right;
  }
};

// ---- scores ---------------------------------------------------------------------------

// Scaled, softcapped score of query row q and key row k; *chain = dS / dS_pre.
float score(const af_problem& p, const float* q, const float* k, float* chain) {
  float dot = 0;
  for (int64_t d = 0; d < p.head_dim_qk; ++d) dot += q[d] * k[d];
  float s = softmax_scale(p) * dot;
  *chain = 1.0f;
  if (p.has_softcap) {
    const float c = static_cast<float>(p.softcap), t = std::tanh(s / c);
    s = c * t;
#if BLIND_BUG != 2
    *chain = 1.0f - t * t;
#endif  // BUG(2): the softcap's 1 - tanh^2 chain factor is missing in the backward
  }
  return s;
}

// Rows [s0, s0 + n) of one head of a tensor, as floats, row-major n x dim.
void load_rows(const Strided& t, int64_t b, int64_t h, int64_t s0, int64_t n, int64_t dim, std::vector<float>& out) {
  out.resize(static_cast<size_t>(n * dim));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < dim; ++d) out[static_cast<size_t>(r * dim + d)] = t.get(b, h, s0 + r, d);
}

// ---- forward --------------------------------------------------------------------------

void forward(const af_problem& p, const af_tensor* q_, const af_tensor* k_, const af_tensor* v_, af_tensor* o_, af_tensor* lse_) {
  const Strided Q(q_), K(k_), V(v_), O(o_), LSE(lse_);
  const Visibility visible{p, native_mask(p)};
  const int64_t Dqk = p.head_dim_qk, Dv = p.head_dim_v, group = p.heads_q / p.heads_kv;
  const bool rtz = BLIND_BUG == 11;  // BUG(11): O stored rounding toward zero (fp16, bf16)
  std::vector<float> qt, kt, vt, s2(kTileQ * kTileKv), m2(kTileQ), l(kTileQ), acc(static_cast<size_t>(kTileQ * Dv));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t q0 = 0; q0 < p.seq_q; q0 += kTileQ) {
        const int64_t nq = std::min(kTileQ, p.seq_q - q0);
        load_rows(Q, b, h, q0, nq, Dqk, qt);
        std::fill(m2.begin(), m2.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.0f);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t k0 = 0; k0 < p.seq_kv; k0 += kTileKv) {
          const int64_t nk = std::min(kTileKv, p.seq_kv - k0);
          load_rows(K, b, h / group, k0, nk, Dqk, kt);
          load_rows(V, b, h / group, k0, nk, Dv, vt);
          for (int64_t r = 0; r < nq; ++r) {
            float tile_max = kNegInf, unused;
            for (int64_t j = 0; j < nk; ++j) {
              float& x = s2[static_cast<size_t>(r * kTileKv + j)];
              x = visible(b, h, q0 + r, k0 + j) ? score(p, &qt[static_cast<size_t>(r * Dqk)], &kt[static_cast<size_t>(j * Dqk)], &unused) * kLog2e
                                                : kNegInf;
              tile_max = std::max(tile_max, x);
            }
            const float m_new = std::max(m2[r], tile_max);
            if (m_new == kNegInf) continue;  // nothing visible so far
            const float alpha = std::exp2(m2[r] - m_new);
            float* a = &acc[static_cast<size_t>(r * Dv)];
            if (alpha != 1.0f) {
              l[r] *= alpha;
#if BLIND_BUG != 3
              for (int64_t d = 0; d < Dv; ++d) a[d] *= alpha;
#endif  // BUG(3): the accumulator is not rescaled when a later tile raises the row maximum
            }
            for (int64_t j = 0; j < nk; ++j) {
              const float pj = std::exp2(s2[static_cast<size_t>(r * kTileKv + j)] - m_new), pr = operand(p.dtype, pj);
#if BLIND_BUG == 10
              l[r] += pr;  // BUG(10): the row sum adds P as rounded for P.V, not the fp32 P
#else
              l[r] += pj;
#endif
              for (int64_t d = 0; d < Dv; ++d) a[d] += pr * vt[static_cast<size_t>(j * Dv + d)];
            }
            m2[r] = m_new;
          }
        }
        for (int64_t r = 0; r < nq; ++r) {
          const bool empty = m2[r] == kNegInf;
          for (int64_t d = 0; d < Dv; ++d) O.put(b, h, q0 + r, d, empty ? 0.0f : acc[static_cast<size_t>(r * Dv + d)] / l[r], rtz);
#if BLIND_BUG == 1
          const float lse = m2[r] + std::log2(l[r]);  // BUG(1): LSE left in base 2
#else
          const float lse = (m2[r] + std::log2(l[r])) * kLn2;
#endif
#if BLIND_BUG == 12
          LSE.put(b, h, q0 + r, 0, empty ? 0.0f : lse);  // BUG(12): a fully masked row's LSE is 0, not -inf
#else
          LSE.put(b, h, q0 + r, 0, empty ? kNegInf : lse);
#endif
        }
      }
}

// ---- backward -------------------------------------------------------------------------

void backward(const af_problem& p, const af_tensor* q_, const af_tensor* k_, const af_tensor* v_, const af_tensor* o_, const af_tensor* lse_,
              const af_tensor* do_, const af_tensor* dlse_, af_tensor* dq_, af_tensor* dk_, af_tensor* dv_) {
  const Strided Q(q_), K(k_), V(v_), O(o_), LSE(lse_), dO(do_), dQ(dq_), dK(dk_), dV(dv_);
#if BLIND_BUG == 9
  const Strided dO_main = dense_rows(do_);
#else
  const Strided& dO_main = dO;
#endif
  const Visibility visible{p, native_mask(p)};
  const int64_t B = p.batch, Hq = p.heads_q, Hkv = p.heads_kv, Sq = p.seq_q, Skv = p.seq_kv, Dqk = p.head_dim_qk, Dv = p.head_dim_v;
  const int64_t group = Hq / Hkv;
  const float scale = softmax_scale(p);
  auto row = [&](int64_t b, int64_t h, int64_t i) { return static_cast<size_t>((b * Hq + h) * Sq + i); };

  // Pre-pass: D = rowsum(dO * O), and the LSE in base 2.
  std::vector<float> Drow(static_cast<size_t>(B * Hq * Sq)), lse2(Drow.size()), g(Drow.size(), 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        float acc = 0;
        for (int64_t d = 0; d < Dv; ++d) acc += dO.get(b, h, i, d) * O.get(b, h, i, d);
        Drow[row(b, h, i)] = acc;
#if BLIND_BUG == 1
        lse2[row(b, h, i)] = LSE.get(b, h, i);  // (bug 1's backward reads its base-2 LSE consistently)
#else
        lse2[row(b, h, i)] = LSE.get(b, h, i) * kLog2e;
#endif
        if (dlse_) g[row(b, h, i)] = Strided(dlse_).get(b, h, i);
      }

#if BLIND_BUG == 14
  // BUG(14): the dQ accumulator is allocated but never zeroed (a missing memset of dq_accum):
  // it starts from whatever the allocator hands back, often a previous call's buffer.
  std::unique_ptr<float[]> dq_acc(new float[static_cast<size_t>(B * Hq * Sq * Dqk)]);
#else
  std::unique_ptr<float[]> dq_acc(new float[static_cast<size_t>(B * Hq * Sq * Dqk)]());
#endif
  std::vector<float> kt, vt, qt, dot, dk_acc(static_cast<size_t>(kTileKv * Dqk)), dv_acc(static_cast<size_t>(kTileKv * Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hk = 0; hk < Hkv; ++hk)
      for (int64_t k0 = 0; k0 < Skv; k0 += kTileKv) {
        const int64_t nk = std::min(kTileKv, Skv - k0);
        load_rows(K, b, hk, k0, nk, Dqk, kt);
        load_rows(V, b, hk, k0, nk, Dv, vt);
        std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
        std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
#if BLIND_BUG == 8
          std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);  // BUG(8): dV keeps only the group's last query head
#endif
          for (int64_t q0 = 0; q0 < Sq; q0 += kTileQ) {
            const int64_t nq = std::min(kTileQ, Sq - q0);
            load_rows(Q, b, h, q0, nq, Dqk, qt);
            load_rows(dO_main, b, h, q0, nq, Dv, dot);
#if BLIND_BUG == 4
            const bool keep_dq = q0 + kTileQ <= Sq;  // BUG(4): a partial last query tile adds nothing to dQ
#else
            const bool keep_dq = true;
#endif
            for (int64_t r = 0; r < nq; ++r) {
              const size_t i = row(b, h, q0 + r);
              if (lse2[i] == kNegInf) continue;  // fully masked row: no gradient
              const float* qr = &qt[static_cast<size_t>(r * Dqk)];
              const float* dor = &dot[static_cast<size_t>(r * Dv)];
#if BLIND_BUG == 6
              const float gi = -g[i];  // BUG(6): dLSE enters dS with the wrong sign
#else
              const float gi = g[i];
#endif
              for (int64_t j = 0; j < nk; ++j) {
                if (!visible(b, h, q0 + r, k0 + j)) continue;
                const float* kj = &kt[static_cast<size_t>(j * Dqk)];
                float chain;
                const float pij = std::exp2(score(p, qr, kj, &chain) * kLog2e - lse2[i]);
                float dp = 0;
                for (int64_t d = 0; d < Dv; ++d) dp += dor[d] * vt[static_cast<size_t>(j * Dv + d)];
                const float pr = operand(p.dtype, pij), ds = operand(p.dtype, pij * (dp - Drow[i] + gi) * chain);
                for (int64_t d = 0; d < Dv; ++d) dv_acc[static_cast<size_t>(j * Dv + d)] += pr * dor[d];
                for (int64_t d = 0; d < Dqk; ++d) dk_acc[static_cast<size_t>(j * Dqk + d)] += ds * qr[d];
                if (keep_dq)
                  for (int64_t d = 0; d < Dqk; ++d) dq_acc[i * static_cast<size_t>(Dqk) + static_cast<size_t>(d)] += ds * kj[d];
              }
            }
          }
        }
#if BLIND_BUG == 5
        const float dk_scale = 1.0f;  // BUG(5): dK is not multiplied by the softmax scale
#else
        const float dk_scale = scale;
#endif
        for (int64_t j = 0; j < nk; ++j) {
          for (int64_t d = 0; d < Dqk; ++d) dK.put(b, hk, k0 + j, d, dk_scale * dk_acc[static_cast<size_t>(j * Dqk + d)]);
          for (int64_t d = 0; d < Dv; ++d) dV.put(b, hk, k0 + j, d, dv_acc[static_cast<size_t>(j * Dv + d)]);
        }
      }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t d = 0; d < Dqk; ++d) dQ.put(b, h, i, d, scale * dq_acc[row(b, h, i) * static_cast<size_t>(Dqk) + static_cast<size_t>(d)]);
}

// ---- the C ABI ------------------------------------------------------------------------

int refuse(char* msg, size_t len, const char* why) {
  if (msg && len) std::snprintf(msg, len, "%s", why);
  return 1;
}

int supports_c(const af_problem* p, char* msg, size_t len) {
  if (p->dtype != AF_F32 && p->dtype != AF_F16 && p->dtype != AF_BF16) return refuse(msg, len, "blind: fp32, fp16 and bf16 only");
  if (!p->mask) return refuse(msg, len, "blind: needs the materialized mask");
  return 0;
}

int forward_c(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse, char* msg,
              size_t len) {
  if (supports_c(p, msg, len)) return 1;
  if (q->device != AF_CPU) return refuse(msg, len, "blind: CPU tensors only");
  try {
    forward(*p, q, k, v, o, lse);
    return 0;
  } catch (const std::exception& e) {
    return refuse(msg, len, e.what());
  }
}

int backward_c(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o, const af_tensor* lse,
               const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv, char* msg, size_t len) {
  if (supports_c(p, msg, len)) return 1;
  if (q->device != AF_CPU) return refuse(msg, len, "blind: CPU tensors only");
  try {
    backward(*p, q, k, v, o, lse, d_o, d_lse, dq, dk, dv);
    return 0;
  } catch (const std::exception& e) {
    return refuse(msg, len, e.what());
  }
}

const af_plugin kPlugin = {
    ATTNFUZZ_PLUGIN_ABI_VERSION,
    kNames[BLIND_BUG],
    "1",
    AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO,
    R"({"fp32":"fp32","fp16":"fp16","bf16":"bf16"})",
    supports_c,
    forward_c,
    backward_c,
};

}  // namespace

extern "C" {
__attribute__((visibility("default"))) uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
__attribute__((visibility("default"))) const af_plugin* attnfuzz_plugin_get(void) { return &kPlugin; }
}
