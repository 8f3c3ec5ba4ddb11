/* minimal_plugin.c: a complete attnfuzz plugin (ABI 3), naive and fp32 only.
 *
 * One query row at a time: scores, softmax, O; the backward recomputes P from the LSE the
 * forward stored. Sums run in double: simple, and well inside the "fp32" contract.
 * Handles GQA, Dqk != Dv, Sq != Skv, softcap, any mask, strided layouts and dLSE.
 *
 *   cc -std=c11 -O2 -fPIC -shared -I<attnfuzz>/backends minimal_plugin.c -o libminimal.so -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attnfuzz_plugin.h"

/* Element (b, h, s, d) of a float32 tensor; strides are in elements and must be honoured. */
static float* at(const af_tensor* t, int64_t b, int64_t h, int64_t s, int64_t d) {
  int64_t i = b * t->strides[0] + h * t->strides[1] + s * t->strides[2];
  if (t->ndim == 4) i += d * t->strides[3];
  return (float*)t->data + i;
}

static int fail(char* msg, size_t len, const char* why) {
  snprintf(msg, len, "%s", why);
  return 1;
}

static int supports(const af_problem* p, char* msg, size_t len) {
  if (p->dtype != AF_F32) return fail(msg, len, "minimal plugin: fp32 only");
  return 0;
}

/* Scores of query row i of head h against every key: softcapped, -inf where masked.
 * tcap[j] (if not NULL) receives tanh(S_pre / c) for the backward's chain rule.
 * Returns the row maximum (-inf when the row is fully masked). */
static double scores(const af_problem* p, const af_tensor* q, const af_tensor* k, int64_t b, int64_t h, int64_t i,
                     double* s, double* tcap) {
  int64_t hk = h / (p->heads_q / p->heads_kv), j, d;
  double m = -INFINITY;
  for (j = 0; j < p->seq_kv; ++j) {
    double dot = 0;
    if (!p->mask[((b * p->heads_q + h) * p->seq_q + i) * p->seq_kv + j]) {
      s[j] = -INFINITY;
      continue;
    }
    for (d = 0; d < p->head_dim_qk; ++d) dot += (double)*at(q, b, h, i, d) * *at(k, b, hk, j, d);
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

static int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o,
                   af_tensor* lse, char* msg, size_t len) {
  int64_t b, h, i, j, d, hk;
  double* s;
  if (supports(p, msg, len)) return 1;
  s = malloc(sizeof(double) * (size_t)p->seq_kv);
  if (!s) return fail(msg, len, "out of memory");
  for (b = 0; b < p->batch; ++b)
    for (h = 0; h < p->heads_q; ++h)
      for (i = 0; i < p->seq_q; ++i) {
        double m = scores(p, q, k, b, h, i, s, NULL), sum = 0;
        hk = h / (p->heads_q / p->heads_kv);
        if (m == -INFINITY) { /* fully masked row: O = 0, LSE = -inf */
          for (d = 0; d < p->head_dim_v; ++d) *at(o, b, h, i, d) = 0.0f;
          *at(lse, b, h, i, 0) = -INFINITY;
          continue;
        }
        for (j = 0; j < p->seq_kv; ++j) sum += exp(s[j] - m);
        for (d = 0; d < p->head_dim_v; ++d) {
          double acc = 0;
          for (j = 0; j < p->seq_kv; ++j) acc += exp(s[j] - m) * *at(v, b, hk, j, d);
          *at(o, b, h, i, d) = (float)(acc / sum);
        }
        *at(lse, b, h, i, 0) = (float)(m + log(sum));
      }
  free(s);
  return 0;
}

static int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v,
                    const af_tensor* o, const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse,
                    af_tensor* dq, af_tensor* dk, af_tensor* dv, char* msg, size_t len) {
  int64_t b, h, i, j, d, hk, Dqk = p->head_dim_qk, Dv = p->head_dim_v;
  size_t nk = (size_t)(p->batch * p->heads_kv * p->seq_kv);
  /* dK and dV sum over the query heads of a group: accumulate in double, store at the end. */
  double *s = malloc(sizeof(double) * (size_t)p->seq_kv), *t = malloc(sizeof(double) * (size_t)p->seq_kv);
  double *gq = malloc(sizeof(double) * (size_t)Dqk), *gk = calloc(nk * (size_t)Dqk, sizeof(double));
  double *gv = calloc(nk * (size_t)Dv, sizeof(double));
  int rc = 0;
  if (supports(p, msg, len)) rc = 1;
  else if (!s || !t || !gq || !gk || !gv) rc = fail(msg, len, "out of memory");
  for (b = 0; !rc && b < p->batch; ++b)
    for (h = 0; h < p->heads_q; ++h)
      for (i = 0; i < p->seq_q; ++i) {
        double L = *at(lse, b, h, i, 0), g = d_lse ? *at(d_lse, b, h, i, 0) : 0.0, D = 0;
        hk = h / (p->heads_q / p->heads_kv);
        for (d = 0; d < Dqk; ++d) gq[d] = 0;
        if (L != -INFINITY) { /* a fully masked row has no gradient */
          scores(p, q, k, b, h, i, s, t);
          for (d = 0; d < Dv; ++d) D += (double)*at(d_o, b, h, i, d) * *at(o, b, h, i, d);
          for (j = 0; j < p->seq_kv; ++j) {
            double P = exp(s[j] - L), dP = 0, dS; /* P = 0 where masked (s = -inf) */
            size_t row = (size_t)((b * p->heads_kv + hk) * p->seq_kv + j);
            if (P == 0) continue;
            for (d = 0; d < Dv; ++d) dP += (double)*at(d_o, b, h, i, d) * *at(v, b, hk, j, d);
            dS = P * (dP - D + g);
            if (p->has_softcap) dS *= 1 - t[j] * t[j];
            for (d = 0; d < Dqk; ++d) gq[d] += dS * *at(k, b, hk, j, d);
            for (d = 0; d < Dqk; ++d) gk[row * Dqk + d] += dS * *at(q, b, h, i, d);
            for (d = 0; d < Dv; ++d) gv[row * Dv + d] += P * *at(d_o, b, h, i, d);
          }
        }
        for (d = 0; d < Dqk; ++d) *at(dq, b, h, i, d) = (float)(p->scale * gq[d]);
      }
  for (b = 0; !rc && b < p->batch; ++b)
    for (hk = 0; hk < p->heads_kv; ++hk)
      for (j = 0; j < p->seq_kv; ++j) {
        size_t row = (size_t)((b * p->heads_kv + hk) * p->seq_kv + j);
        for (d = 0; d < Dqk; ++d) *at(dk, b, hk, j, d) = (float)(p->scale * gk[row * Dqk + d]);
        for (d = 0; d < Dv; ++d) *at(dv, b, hk, j, d) = (float)gv[row * Dv + d];
      }
  free(s);
  free(t);
  free(gq);
  free(gk);
  free(gv);
  return rc;
}

static const af_plugin plugin = {
    ATTNFUZZ_PLUGIN_ABI_VERSION,
    "minimal",
    "1.0",
    AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO,
    "{\"fp32\":\"fp32\"}",
    supports,
    forward,
    backward,
};

uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
