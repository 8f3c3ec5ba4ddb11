/* varlen_plugin.c: a CPU plugin of the varlen interface (ABI 3: AF_TAKES_PACKED, AF_TAKES_PAGED_KV).
 *
 * Naive attention on packed tensors: sequence b's queries and keys are found through
 * cu_seqlens and seqused, and in a paged forward its keys through the page table. fp32, fp16 and
 * bf16 (sums in double), GQA, Dqk != Dv, softcap, dLSE, fully masked rows. Masks: none, or causal
 * aligned bottom-right in every sequence, in the whole problem's coordinates (lens_q, lens_kv and
 * the offsets), so that a composition's parts are taken too; supports() checks that against the
 * dense mask and declines every other mask.
 *
 * Planted bugs, one per build (tests/test_mutant_zoo.cpp, VarlenPlugin):
 *   VARLEN_PLUGIN_BUG_OFF_BY_ONE   every row reads one key more than it sees: past its sequence's end
 *                                  (a gap, the next sequence's first key, the tail, a page's NaN rows;
 *                                  never outside the buffer) or, under the causal mask, a hidden key
 *   VARLEN_PLUGIN_BUG_WRITES_TAIL  the forward also zeroes O's tail rows (a tile loop bounded by
 *                                  total_q rather than by the sequences)
 * and declarations the loader refuses: VARLEN_PLUGIN_PAGED_ONLY (AF_TAKES_PAGED_KV without
 * AF_TAKES_PACKED), VARLEN_PLUGIN_NOT_RAGGED (an envelope saying "ragged": false).
 *
 *   cc -std=c11 -O2 -fPIC -shared -I<attnfuzz>/backends varlen_plugin.c -o libvarlen.so -lm
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnfuzz_plugin.h"

enum { MASK_NONE = 0, MASK_CAUSAL = 1, MASK_OTHER = -1 };

static int fail(char* msg, size_t len, const char* why) {
  snprintf(msg, len, "varlen plugin: %s", why);
  return 1;
}

/* ---- fp16 and bf16 as 16-bit patterns, rounded to nearest even ---- */

static float f16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  float f;
  if (e == 0) {
    f = ldexpf((float)m, -24);
    return sign ? -f : f;
  }
  x = e == 0x1f ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t float_to_f16(float f) {
  uint32_t x, sign, m, h, rem, half, shift;
  int32_t e;
  memcpy(&x, &f, 4);
  sign = (x >> 16) & 0x8000u;
  m = x & 0x7fffffu;
  if (((x >> 23) & 0xffu) == 0xffu) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0u));
  e = (int32_t)((x >> 23) & 0xffu) - 112; /* the half exponent */
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) { /* subnormal: 2^-24 units */
    if (e < -10) return (uint16_t)sign;
    m |= 0x800000u;
    shift = (uint32_t)(14 - e);
    h = m >> shift;
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return (uint16_t)(sign | h);
  }
  h = ((uint32_t)e << 10) | (m >> 13);
  rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h; /* a carry rounds up into the exponent, to inf at most */
  return (uint16_t)(sign | h);
}

static float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* Element `off` (in elements, from data) of a tensor of any dtype. */
static double load(const af_tensor* t, int64_t off) {
  if (t->dtype == AF_F16) return f16_to_float(((const uint16_t*)t->data)[off]);
  if (t->dtype == AF_BF16) return bf16_to_float(((const uint16_t*)t->data)[off]);
  return ((const float*)t->data)[off];
}

static void store(const af_tensor* t, int64_t off, double x) {
  if (t->dtype == AF_F16)
    ((uint16_t*)t->data)[off] = float_to_f16((float)x);
  else if (t->dtype == AF_BF16)
    ((uint16_t*)t->data)[off] = float_to_bf16((float)x);
  else
    ((float*)t->data)[off] = (float)x;
}

/* ---- where things are ---- */

/* Row r of head h of a packed tensor ([1][H][T][D], or [1][H][T] for LSE): its first element. */
static int64_t row_at(const af_tensor* t, int64_t h, int64_t r) { return h * t->strides[1] + r * t->strides[2]; }

/* Key j of sequence b, kv head hk: the offset of its first element in K or V, or -1 where the
 * buffer holds no such row (a key past the last page of the table, or past the packed rows). */
static int64_t key_at(const af_problem* p, const af_tensor* t, int64_t b, int64_t hk, int64_t j) {
  if (p->page_table) {
    int64_t page;
    if (j / p->page_size >= p->pages_per_seq) return -1;
    page = p->page_table[b * p->pages_per_seq + j / p->page_size];
    if (page < 0) return -1;
    return page * t->strides[0] + hk * t->strides[1] + (j % p->page_size) * t->strides[2];
  }
  if (p->cu_seqlens_kv[b] + j >= p->total_kv) return -1;
  return row_at(t, hk, p->cu_seqlens_kv[b] + j);
}

/* Key j of sequence b is visible to its query i (this call's coordinates) under the causal mask
 * iff j <= i + shift: the bottom-right diagonal of the whole sequence, moved by the offsets. */
static int64_t causal_shift(const af_problem* p, int64_t b) {
  int64_t lq = p->lens_q ? p->lens_q[b] : p->full_seq_q, lk = p->lens_kv ? p->lens_kv[b] : p->full_seq_kv;
  return lk - lq + p->q_offset - p->kv_offset;
}

/* The mask the dense mask is in every sequence's block of every head, nothing visible outside. */
static int mask_mode(const af_problem* p) {
  int mode;
  for (mode = MASK_NONE; mode <= MASK_CAUSAL; ++mode) {
    int64_t b, h, i, j, ok = 1;
    for (b = 0; ok && b < p->batch; ++b) {
      int64_t lq = p->seqused_q[b], lk = p->seqused_kv[b], shift = causal_shift(p, b);
      for (h = 0; ok && h < p->heads_q; ++h)
        for (i = 0; ok && i < p->seq_q; ++i) {
          const uint8_t* row = p->mask + ((b * p->heads_q + h) * p->seq_q + i) * p->seq_kv;
          for (j = 0; ok && j < p->seq_kv; ++j) {
            int expected = i < lq && j < lk && (mode == MASK_NONE || j <= i + shift);
            ok = (row[j] != 0) == expected;
          }
        }
    }
    if (ok) return mode;
  }
  return MASK_OTHER;
}

/* Query i of sequence b sees keys [0, end). */
static int64_t keys_seen(int mode, int64_t i, int64_t lk, int64_t shift) {
  int64_t end = mode == MASK_CAUSAL ? i + shift + 1 : lk;
  if (end > lk) end = lk;
  if (end < 0) end = 0;
#ifdef VARLEN_PLUGIN_BUG_OFF_BY_ONE
  ++end;
#endif
  return end;
}

static int supports(const af_problem* p, char* msg, size_t len) {
  if (p->dtype != AF_F32 && p->dtype != AF_F16 && p->dtype != AF_BF16) return fail(msg, len, "fp32, fp16 and bf16 only");
  if (!p->cu_seqlens_q || !p->seqused_q) return fail(msg, len, "no varlen interface in the problem (an attnfuzz older than ABI 3?)");
  if (mask_mode(p) == MASK_OTHER)
    return fail(msg, len, "declines the mask: neither none nor causal aligned bottom-right in every sequence");
  return 0;
}

/* Scores of query row r (sequence b, query i, head h) against keys [0, end): softcapped. tcap (if
 * not NULL) receives tanh(S_pre / c). Keys the buffer does not hold score -inf. Returns the maximum. */
static double scores(const af_problem* p, const af_tensor* q, const af_tensor* k, int64_t b, int64_t h, int64_t r, int64_t end, double* s,
                     double* tcap) {
  int64_t hk = h / (p->heads_q / p->heads_kv), j, d, qo = row_at(q, h, r);
  double m = -INFINITY;
  for (j = 0; j < end; ++j) {
    int64_t ko = key_at(p, k, b, hk, j);
    double dot = 0;
    if (ko < 0) {
      s[j] = -INFINITY;
      continue;
    }
    for (d = 0; d < p->head_dim_qk; ++d) dot += load(q, qo + d * q->strides[3]) * load(k, ko + d * k->strides[3]);
    s[j] = p->scale * dot;
    if (p->has_softcap) {
      double t = tanh(s[j] / p->softcap);
      if (tcap) tcap[j] = t;
      s[j] = p->softcap * t;
    }
    if (s[j] > m) m = s[j];
  }
  return m;
}

static int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse, char* msg,
                   size_t len) {
  int64_t b, h, i, j, d;
  int mode;
  double* s;
  if (supports(p, msg, len)) return 1;
  mode = mask_mode(p);
  s = malloc(sizeof(double) * (size_t)(p->max_seqlen_kv + 1));
  if (!s) return fail(msg, len, "out of memory");
  for (b = 0; b < p->batch; ++b) {
    int64_t lk = p->seqused_kv[b], shift = causal_shift(p, b);
    for (h = 0; h < p->heads_q; ++h) {
      int64_t hk = h / (p->heads_q / p->heads_kv);
      for (i = 0; i < p->seqused_q[b]; ++i) {
        int64_t r = p->cu_seqlens_q[b] + i, end = keys_seen(mode, i, lk, shift), oo = row_at(o, h, r);
        double m = scores(p, q, k, b, h, r, end, s, NULL), sum = 0;
        if (m == -INFINITY) { /* no visible key: O = 0, LSE = -inf */
          for (d = 0; d < p->head_dim_v; ++d) store(o, oo + d * o->strides[3], 0.0);
          ((float*)lse->data)[row_at(lse, h, r)] = -INFINITY;
          continue;
        }
        for (j = 0; j < end; ++j) sum += exp(s[j] - m);
        for (d = 0; d < p->head_dim_v; ++d) {
          double acc = 0;
          for (j = 0; j < end; ++j)
            if (s[j] != -INFINITY) acc += exp(s[j] - m) * load(v, key_at(p, v, b, hk, j) + d * v->strides[3]);
          store(o, oo + d * o->strides[3], acc / sum);
        }
        ((float*)lse->data)[row_at(lse, h, r)] = (float)(m + log(sum));
      }
    }
  }
#ifdef VARLEN_PLUGIN_BUG_WRITES_TAIL
  for (i = p->cu_seqlens_q[p->batch]; i < p->total_q; ++i)
    for (h = 0; h < p->heads_q; ++h)
      for (d = 0; d < p->head_dim_v; ++d) store(o, row_at(o, h, i) + d * o->strides[3], 0.0);
#endif
  free(s);
  return 0;
}

static int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o,
                    const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv,
                    char* msg, size_t len) {
  int64_t b, h, i, j, d, Dqk = p->head_dim_qk, Dv = p->head_dim_v;
  /* dK and dV sum over the query rows of a sequence and the query heads of a group, indexed by
   * packed key row (backward() never gets pages). */
  size_t nk = (size_t)(p->total_kv * p->heads_kv);
  double *s = malloc(sizeof(double) * (size_t)(p->max_seqlen_kv + 1)), *t = malloc(sizeof(double) * (size_t)(p->max_seqlen_kv + 1));
  double *gq = malloc(sizeof(double) * (size_t)Dqk), *gk = calloc(nk * (size_t)Dqk + 1, sizeof(double));
  double* gv = calloc(nk * (size_t)Dv + 1, sizeof(double));
  int rc = 0, mode = 0;
  if (supports(p, msg, len))
    rc = 1;
  else if (p->page_table)
    rc = fail(msg, len, "backward() was handed a page table");
  else if (!s || !t || !gq || !gk || !gv)
    rc = fail(msg, len, "out of memory");
  if (!rc) mode = mask_mode(p);
  for (b = 0; !rc && b < p->batch; ++b) {
    int64_t lk = p->seqused_kv[b], shift = causal_shift(p, b);
    for (h = 0; h < p->heads_q; ++h) {
      int64_t hk = h / (p->heads_q / p->heads_kv);
      for (i = 0; i < p->seqused_q[b]; ++i) {
        int64_t r = p->cu_seqlens_q[b] + i, end = keys_seen(mode, i, lk, shift), qo = row_at(q, h, r);
        int64_t go = row_at(d_o, h, r), oo = row_at(o, h, r);
        double L = ((const float*)lse->data)[row_at(lse, h, r)], g = d_lse ? ((const float*)d_lse->data)[row_at(d_lse, h, r)] : 0.0, D = 0;
        for (d = 0; d < Dqk; ++d) gq[d] = 0;
        if (L != -INFINITY) { /* a fully masked row has no gradient */
          scores(p, q, k, b, h, r, end, s, t);
          for (d = 0; d < Dv; ++d) D += load(d_o, go + d * d_o->strides[3]) * load(o, oo + d * o->strides[3]);
          for (j = 0; j < end; ++j) {
            int64_t ko = key_at(p, k, b, hk, j), vo = key_at(p, v, b, hk, j);
            size_t row = (size_t)((p->cu_seqlens_kv[b] + j) * p->heads_kv + hk);
            double P = exp(s[j] - L), dP = 0, dS;
            if (ko < 0 || P == 0) continue; /* no such key in the buffer, or no weight */
            for (d = 0; d < Dv; ++d) dP += load(d_o, go + d * d_o->strides[3]) * load(v, vo + d * v->strides[3]);
            dS = P * (dP - D + g);
            if (p->has_softcap) dS *= 1 - t[j] * t[j];
            for (d = 0; d < Dqk; ++d) gq[d] += dS * load(k, ko + d * k->strides[3]);
            for (d = 0; d < Dqk; ++d) gk[row * (size_t)Dqk + (size_t)d] += dS * load(q, qo + d * q->strides[3]);
            for (d = 0; d < Dv; ++d) gv[row * (size_t)Dv + (size_t)d] += P * load(d_o, go + d * d_o->strides[3]);
          }
        }
        for (d = 0; d < Dqk; ++d) store(dq, row_at(dq, h, r) + d * dq->strides[3], p->scale * gq[d]);
      }
    }
  }
  for (b = 0; !rc && b < p->batch; ++b)
    for (j = 0; j < p->seqused_kv[b]; ++j)
      for (h = 0; h < p->heads_kv; ++h) {
        int64_t r = p->cu_seqlens_kv[b] + j;
        size_t row = (size_t)(r * p->heads_kv + h);
        for (d = 0; d < Dqk; ++d) store(dk, row_at(dk, h, r) + d * dk->strides[3], p->scale * gk[row * (size_t)Dqk + (size_t)d]);
        for (d = 0; d < Dv; ++d) store(dv, row_at(dv, h, r) + d * dv->strides[3], gv[row * (size_t)Dv + (size_t)d]);
      }
  free(s);
  free(t);
  free(gq);
  free(gk);
  free(gv);
  return rc;
}

#ifdef VARLEN_PLUGIN_PAGED_ONLY
#define VARLEN_PLUGIN_TAKES AF_TAKES_PAGED_KV
#else
#define VARLEN_PLUGIN_TAKES (AF_TAKES_PACKED | AF_TAKES_PAGED_KV)
#endif

static const af_plugin plugin = {
    ATTNFUZZ_PLUGIN_ABI_VERSION,
    "varlen",
    "1.0",
    AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO | VARLEN_PLUGIN_TAKES,
    "{\"fp32\":\"fp32\",\"fp16\":\"fp16\",\"bf16\":\"bf16\"}",
    supports,
    forward,
    backward,
};

uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
const char* attnfuzz_plugin_envelope(void) {
#ifdef VARLEN_PLUGIN_NOT_RAGGED
  return "{\"ragged\": false}";
#else
  return "{\"masks\": \"causal_or_none\"}";
#endif
}
