/* minimal_cuda_plugin.cu: a complete attnfuzz CUDA plugin (ABI 3), naive but correct.
 *
 * Tensors and the mask arrive in GPU memory (AF_DEVICE_IS_CUDA). One thread per query row
 * computes the scores, softmax, O and LSE (forward), or P, dS and dQ (backward); then one
 * thread per key row sums dK and dV over the query rows and the query heads of its group:
 * no atomics, so the result is deterministic. Sums run in double. fp32, fp16 and bf16; GQA,
 * Dqk != Dv, Sq != Skv, softcap, any mask, strided layouts, dLSE, fully masked rows.
 *
 *   nvcc -O2 -shared -Xcompiler -fPIC -arch=sm_90 -I<attnfuzz>/backends \
 *        minimal_cuda_plugin.cu -o libminimal_cuda.so
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdio.h>

#include "attnfuzz_plugin.h"

/* Element (b, h, s, d) of a tensor (d ignored for LSE and dLSE); strides must be honoured. */
static __device__ int64_t at(const af_tensor& t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return b * t.strides[0] + h * t.strides[1] + s * t.strides[2] + (t.ndim == 4 ? d * t.strides[3] : 0);
}
static __device__ double load(const af_tensor& t, int64_t b, int64_t h, int64_t s, int64_t d) {
  const int64_t i = at(t, b, h, s, d);
  if (t.dtype == AF_F16) return __half2float(((const __half*)t.data)[i]);
  if (t.dtype == AF_BF16) return __bfloat162float(((const __nv_bfloat16*)t.data)[i]);
  return ((const float*)t.data)[i];
}
/* Rounds to nearest even, from double directly (no double rounding through float). */
static __device__ void store(const af_tensor& t, int64_t b, int64_t h, int64_t s, int64_t d, double x) {
  const int64_t i = at(t, b, h, s, d);
  if (t.dtype == AF_F16) ((__half*)t.data)[i] = __double2half(x);
  else if (t.dtype == AF_BF16) ((__nv_bfloat16*)t.data)[i] = __double2bfloat16(x);
  else ((float*)t.data)[i] = (float)x;
}

/* Query row r = (b * Hq + h) * Sq + i; its kv head under GQA. */
struct Row {
  int64_t b, h, i, hk;
};
static __device__ Row query_row(const af_problem& p, int64_t r) {
  Row x = {r / (p.heads_q * p.seq_q), r / p.seq_q % p.heads_q, r % p.seq_q, 0};
  x.hk = x.h / (p.heads_q / p.heads_kv);
  return x;
}

/* Score of query row x against key j: softcapped, -inf where masked (the device mask).
 * *tcap receives tanh(S_pre / c) for the backward's chain rule. */
static __device__ double score(const af_problem& p, const af_tensor& q, const af_tensor& k, Row x, int64_t j, double* tcap) {
  double dot = 0, s;
  *tcap = 0;
  if (!p.mask_device[((x.b * p.heads_q + x.h) * p.seq_q + x.i) * p.seq_kv + j]) return -INFINITY;
  for (int64_t d = 0; d < p.head_dim_qk; ++d) dot += load(q, x.b, x.h, x.i, d) * load(k, x.b, x.hk, j, d);
  s = p.scale * dot;
  if (p.has_softcap) {
    *tcap = tanh(s / p.softcap);
    s = p.softcap * *tcap;
  }
  return s;
}

/* S: scratch, one row of Skv scores per query row. */
static __global__ void forward_rows(af_problem p, af_tensor q, af_tensor k, af_tensor v, af_tensor o, af_tensor lse, double* S) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= p.batch * p.heads_q * p.seq_q) return;
  const Row x = query_row(p, r);
  double *s = S + r * p.seq_kv, m = -INFINITY, sum = 0, t;
  for (int64_t j = 0; j < p.seq_kv; ++j) m = fmax(m, s[j] = score(p, q, k, x, j, &t));
  if (m == -INFINITY) { /* fully masked row: O = 0, LSE = -inf */
    for (int64_t d = 0; d < p.head_dim_v; ++d) store(o, x.b, x.h, x.i, d, 0.0);
    store(lse, x.b, x.h, x.i, 0, -INFINITY);
    return;
  }
  for (int64_t j = 0; j < p.seq_kv; ++j) sum += exp(s[j] - m);
  for (int64_t d = 0; d < p.head_dim_v; ++d) {
    double acc = 0;
    for (int64_t j = 0; j < p.seq_kv; ++j) acc += exp(s[j] - m) * load(v, x.b, x.hk, j, d);
    store(o, x.b, x.h, x.i, d, acc / sum);
  }
  store(lse, x.b, x.h, x.i, 0, m + log(sum));
}

/* Per query row: P and dS into scratch (P = 0 where masked), and dQ. */
static __global__ void backward_rows(af_problem p, af_tensor q, af_tensor k, af_tensor v, af_tensor o, af_tensor lse, af_tensor d_o,
                              af_tensor d_lse, int has_dlse, af_tensor dq, double* P, double* dS) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= p.batch * p.heads_q * p.seq_q) return;
  const Row x = query_row(p, r);
  const double L = load(lse, x.b, x.h, x.i, 0), g = has_dlse ? load(d_lse, x.b, x.h, x.i, 0) : 0.0;
  double D = 0, t;
  for (int64_t d = 0; d < p.head_dim_v; ++d) D += load(d_o, x.b, x.h, x.i, d) * load(o, x.b, x.h, x.i, d);
  for (int64_t j = 0; j < p.seq_kv; ++j) {
    const double s = score(p, q, k, x, j, &t);
    double pj = L == -INFINITY ? 0.0 : exp(s - L), dp = 0; /* a fully masked row has no gradient */
    if (pj != 0)
      for (int64_t d = 0; d < p.head_dim_v; ++d) dp += load(d_o, x.b, x.h, x.i, d) * load(v, x.b, x.hk, j, d);
    P[r * p.seq_kv + j] = pj;
    dS[r * p.seq_kv + j] = pj * (dp - D + g) * (p.has_softcap ? 1 - t * t : 1.0);
  }
  for (int64_t d = 0; d < p.head_dim_qk; ++d) {
    double acc = 0;
    for (int64_t j = 0; j < p.seq_kv; ++j) acc += dS[r * p.seq_kv + j] * load(k, x.b, x.hk, j, d);
    store(dq, x.b, x.h, x.i, d, p.scale * acc);
  }
}

/* Per key row (b, hk, j): dK and dV summed over the query rows of every query head of the group. */
static __global__ void backward_keys(af_problem p, af_tensor q, af_tensor d_o, af_tensor dk, af_tensor dv, const double* P, const double* dS) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= p.batch * p.heads_kv * p.seq_kv) return;
  const int64_t b = r / (p.heads_kv * p.seq_kv), hk = r / p.seq_kv % p.heads_kv, j = r % p.seq_kv, group = p.heads_q / p.heads_kv;
  for (int64_t d = 0; d < p.head_dim_qk; ++d) {
    double acc = 0;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i) acc += dS[((b * p.heads_q + h) * p.seq_q + i) * p.seq_kv + j] * load(q, b, h, i, d);
    store(dk, b, hk, j, d, p.scale * acc);
  }
  for (int64_t d = 0; d < p.head_dim_v; ++d) {
    double acc = 0;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t i = 0; i < p.seq_q; ++i) acc += P[((b * p.heads_q + h) * p.seq_q + i) * p.seq_kv + j] * load(d_o, b, h, i, d);
    store(dv, b, hk, j, d, acc);
  }
}

static int fail(char* msg, size_t len, const char* what, cudaError_t e) {
  snprintf(msg, len, "minimal_cuda: %s: %s", what, cudaGetErrorString(e));
  return 1;
}

/* Waits for the kernels: a launch or execution error is this call's error. */
static int finish(char* msg, size_t len, const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return e == cudaSuccess ? 0 : fail(msg, len, what, e);
}

static int supports(const af_problem* p, char* msg, size_t len) {
  if (p->dtype != AF_F32 && p->dtype != AF_F16 && p->dtype != AF_BF16) {
    snprintf(msg, len, "minimal_cuda: fp32, fp16 and bf16 only");
    return 1;
  }
  return 0;
}

/* A part of a composition can be empty (an empty key range): a grid of 0 blocks would be a
 * launch error, so launch one block whose threads have nothing to do. */
static unsigned blocks(int64_t threads) { return threads > 0 ? (unsigned)((threads + 127) / 128) : 1u; }

static int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o,
                   af_tensor* lse, char* msg, size_t len) {
  const int64_t rows = p->batch * p->heads_q * p->seq_q;
  double* S = NULL;
  cudaError_t e = cudaSetDevice(q->device_index);
  if (e == cudaSuccess) e = cudaMalloc(&S, sizeof(double) * (size_t)(rows * p->seq_kv + 1));
  if (e != cudaSuccess) return fail(msg, len, "forward setup", e);
  forward_rows<<<blocks(rows), 128>>>(*p, *q, *k, *v, *o, *lse, S);
  const int rc = finish(msg, len, "forward");
  cudaFree(S);
  return rc;
}

static int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v,
                    const af_tensor* o, const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse,
                    af_tensor* dq, af_tensor* dk, af_tensor* dv, char* msg, size_t len) {
  const int64_t rows = p->batch * p->heads_q * p->seq_q, keys = p->batch * p->heads_kv * p->seq_kv;
  const size_t scratch = sizeof(double) * (size_t)(rows * p->seq_kv + 1);
  double *P = NULL, *dS = NULL;
  af_tensor no_dlse = {0};
  int rc;
  cudaError_t e = cudaSetDevice(q->device_index);
  if (e == cudaSuccess) e = cudaMalloc(&P, scratch);
  if (e == cudaSuccess) e = cudaMalloc(&dS, scratch);
  if (e != cudaSuccess) {
    cudaFree(P);
    return fail(msg, len, "backward setup", e);
  }
  backward_rows<<<blocks(rows), 128>>>(*p, *q, *k, *v, *o, *lse, *d_o, d_lse ? *d_lse : no_dlse, d_lse != NULL, *dq, P, dS);
  rc = finish(msg, len, "backward (query rows)");
  if (rc == 0) {
    backward_keys<<<blocks(keys), 128>>>(*p, *q, *d_o, *dk, *dv, P, dS);
    rc = finish(msg, len, "backward (key rows)");
  }
  cudaFree(P);
  cudaFree(dS);
  return rc;
}

static const af_plugin plugin = {
    ATTNFUZZ_PLUGIN_ABI_VERSION,
    "minimal_cuda",
    "1.0",
    AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO | AF_DEVICE_IS_CUDA,
    "{\"fp32\":\"fp32\",\"fp16\":\"fp16\",\"bf16\":\"bf16\"}",
    supports,
    forward,
    backward,
};

/* nvcc compiles C++: the two entry points need C linkage. */
extern "C" uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
extern "C" const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
