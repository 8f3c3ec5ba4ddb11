/* varlen_cuda_plugin.cu: the CUDA twin of varlen_plugin.c, a plugin of the varlen interface on the GPU
 * (ABI 3: AF_DEVICE_IS_CUDA | AF_TAKES_PACKED | AF_TAKES_PAGED_KV).
 *
 * Naive attention on packed tensors in GPU memory: sequence b's queries and keys are found through
 * cu_seqlens_*_device and seqused_*_device, and in a paged forward its keys through
 * page_table_device. One thread per query row of a sequence (grid: max_seqlen_q rows x Hq x B)
 * computes the scores, softmax, O and LSE (forward), or P, dS and dQ (backward); then one thread
 * per key row of a sequence (max_seqlen_kv x Hkv x B) sums dK and dV over the queries of its
 * sequence and the query heads of its group, recomputing P from the LSE: no atomics, so every
 * output repeats bit for bit. Sums run in double. fp32, fp16 and bf16, GQA, Dqk != Dv, softcap,
 * dLSE, fully masked rows. Rows past a sequence (the gaps, the tail) are neither read nor written.
 *
 * The same rules as varlen_plugin.c: masks none, or causal aligned bottom-right in every sequence
 * in the whole problem's coordinates (lens_q, lens_kv and the offsets), every other mask declined.
 * supports() checks that against the host mask; forward() and backward() classify mask_device on
 * the GPU the same way (and fail if it is neither), then read keys [0, end) of each row.
 *
 * Planted bugs, one per build (tests/plugins/cuda_plugin_test.sh), the defines of varlen_plugin.c:
 *   VARLEN_PLUGIN_BUG_OFF_BY_ONE   every row reads one key more than it sees: past its sequence's end
 *                                  (a gap, the next sequence's first key, the tail, a page's NaN rows;
 *                                  never outside the buffer) or, under the causal mask, a hidden key
 *   VARLEN_PLUGIN_BUG_WRITES_TAIL  the forward also zeroes O's tail rows (a tile loop bounded by
 *                                  total_q rather than by the sequences)
 *
 *   nvcc -O2 -shared -Xcompiler -fPIC -arch=sm_90 -I<attnfuzz>/backends \
 *        varlen_cuda_plugin.cu -o libvarlen_cuda.so
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "attnfuzz_plugin.h"

#if defined(VARLEN_PLUGIN_BUG_OFF_BY_ONE)
#define VARLEN_CUDA_NAME "varlen_cuda_off_by_one"
#elif defined(VARLEN_PLUGIN_BUG_WRITES_TAIL)
#define VARLEN_CUDA_NAME "varlen_cuda_writes_tail"
#else
#define VARLEN_CUDA_NAME "varlen_cuda"
#endif

enum { MASK_NONE = 0, MASK_CAUSAL = 1, MASK_OTHER = -1 };

static int fail(char* msg, size_t len, const char* why) {
  snprintf(msg, len, VARLEN_CUDA_NAME ": %s", why);
  return 1;
}
static int fail_cuda(char* msg, size_t len, const char* what, cudaError_t e) {
  snprintf(msg, len, VARLEN_CUDA_NAME ": %s: %s", what, cudaGetErrorString(e));
  return 1;
}

/* ---- the sequences and the mask (host and device alike) ---- */

/* Key j of sequence b is visible to its query i (this call's coordinates) under the causal mask
 * iff j <= i + shift: the bottom-right diagonal of the whole sequence, moved by the offsets. */
static int64_t causal_shift(const af_problem* p, int64_t b) {
  int64_t lq = p->lens_q ? p->lens_q[b] : p->full_seq_q, lk = p->lens_kv ? p->lens_kv[b] : p->full_seq_kv;
  return lk - lq + p->q_offset - p->kv_offset;
}

/* Query i of sequence b sees keys [0, end). */
static __device__ int64_t keys_seen(int mode, int64_t i, int64_t lk, int64_t shift) {
  int64_t end = mode == MASK_CAUSAL ? i + shift + 1 : lk;
  if (end > lk) end = lk;
  if (end < 0) end = 0;
#ifdef VARLEN_PLUGIN_BUG_OFF_BY_ONE
  ++end;
#endif
  return end;
}

/* The mask the host mask is in every sequence's block of every head, nothing visible outside
 * (varlen_plugin.c's mask_mode, for supports(), which has no device arrays). */
static int mask_mode_host(const af_problem* p) {
  for (int mode = MASK_NONE; mode <= MASK_CAUSAL; ++mode) {
    int ok = 1;
    for (int64_t b = 0; ok && b < p->batch; ++b) {
      const int64_t lq = p->seqused_q[b], lk = p->seqused_kv[b], shift = causal_shift(p, b);
      for (int64_t h = 0; ok && h < p->heads_q; ++h)
        for (int64_t i = 0; ok && i < p->seq_q; ++i) {
          const uint8_t* row = p->mask + ((b * p->heads_q + h) * p->seq_q + i) * p->seq_kv;
          for (int64_t j = 0; ok && j < p->seq_kv; ++j) {
            const int expected = i < lq && j < lk && (mode == MASK_NONE || j <= i + shift);
            ok = (row[j] != 0) == expected;
          }
        }
    }
    if (ok) return mode;
  }
  return MASK_OTHER;
}

/* The same on the GPU, from mask_device: one thread per mask row [b][h][i] clears ok[0] (not the
 * mask none) and ok[1] (not causal bottom-right) where the row says so. Every thread that clears
 * a flag stores the same 0: the result does not depend on their order. */
static __global__ void classify_mask(af_problem p, const int64_t* shift, int* ok) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= p.batch * p.heads_q * p.seq_q) return;
  const int64_t b = r / (p.heads_q * p.seq_q), i = r % p.seq_q;
  const int64_t lq = p.seqused_q_device[b], lk = p.seqused_kv_device[b], sh = shift[b];
  const uint8_t* row = p.mask_device + r * p.seq_kv;
  bool none = true, causal = true;
  for (int64_t j = 0; (none || causal) && j < p.seq_kv; ++j) {
    const bool visible = row[j] != 0, inside = i < lq && j < lk;
    if (visible != inside) none = false;
    if (visible != (inside && j <= i + sh)) causal = false;
  }
  if (!none) ok[0] = 0;
  if (!causal) ok[1] = 0;
}

/* ---- elements: fp32, or fp16 and bf16 as 16-bit patterns ---- */

static __device__ double load(const af_tensor& t, int64_t off) {
  if (t.dtype == AF_F16) return __half2float(((const __half*)t.data)[off]);
  if (t.dtype == AF_BF16) return __bfloat162float(((const __nv_bfloat16*)t.data)[off]);
  return ((const float*)t.data)[off];
}
/* Rounds to nearest even, from double directly (no double rounding through float). */
static __device__ void store(const af_tensor& t, int64_t off, double x) {
  if (t.dtype == AF_F16)
    ((__half*)t.data)[off] = __double2half(x);
  else if (t.dtype == AF_BF16)
    ((__nv_bfloat16*)t.data)[off] = __double2bfloat16(x);
  else
    ((float*)t.data)[off] = (float)x;
}
static __device__ float load_f32(const af_tensor& t, int64_t off) { return ((const float*)t.data)[off]; }

/* Row r of head h of a packed tensor ([1][H][T][D], or [1][H][T] for LSE): its first element. */
static __device__ int64_t row_at(const af_tensor& t, int64_t h, int64_t r) { return h * t.strides[1] + r * t.strides[2]; }

/* Key j of sequence b, kv head hk: the offset of its first element in K or V, or -1 where the
 * buffer holds no such row (a key past the last page of the table, or past the packed rows). */
static __device__ int64_t key_at(const af_problem& p, const af_tensor& t, int64_t b, int64_t hk, int64_t j) {
  if (p.page_table_device) {
    if (j / p.page_size >= p.pages_per_seq) return -1;
    const int64_t page = p.page_table_device[b * p.pages_per_seq + j / p.page_size];
    if (page < 0) return -1;
    return page * t.strides[0] + hk * t.strides[1] + (j % p.page_size) * t.strides[2];
  }
  if (p.cu_seqlens_kv_device[b] + j >= p.total_kv) return -1;
  return row_at(t, hk, p.cu_seqlens_kv_device[b] + j);
}

/* Score of the query at offset qo against the key at offset ko: softcapped. *tcap receives
 * tanh(S_pre / c) for the backward's chain rule. */
static __device__ double score(const af_problem& p, const af_tensor& q, const af_tensor& k, int64_t qo, int64_t ko, double* tcap) {
  double dot = 0, s;
  for (int64_t d = 0; d < p.head_dim_qk; ++d) dot += load(q, qo + d * q.strides[3]) * load(k, ko + d * k.strides[3]);
  s = p.scale * dot;
  *tcap = 0;
  if (p.has_softcap) {
    *tcap = tanh(s / p.softcap);
    s = p.softcap * *tcap;
  }
  return s;
}

/* ---- kernels ---- */

/* Query i of sequence b = blockIdx.z, head h = blockIdx.y. acc: Dv doubles of scratch per packed
 * row and head. Two passes over the keys: the maximum, then the weights. */
static __global__ void forward_rows(af_problem p, int mode, const int64_t* shift, af_tensor q, af_tensor k, af_tensor v, af_tensor o,
                                    af_tensor lse, double* acc) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
  if (i >= p.seqused_q_device[b]) return;
  const int64_t hk = h / (p.heads_q / p.heads_kv), r = p.cu_seqlens_q_device[b] + i;
  const int64_t end = keys_seen(mode, i, p.seqused_kv_device[b], shift[b]), qo = row_at(q, h, r), oo = row_at(o, h, r);
  double* a = acc + (r * p.heads_q + h) * p.head_dim_v;
  double m = -INFINITY, sum = 0, t;
  for (int64_t j = 0; j < end; ++j) {
    const int64_t ko = key_at(p, k, b, hk, j);
    if (ko < 0) continue; /* no such key in the buffer: -inf */
    const double s = score(p, q, k, qo, ko, &t);
    if (s > m) m = s;
  }
  if (m == -INFINITY) { /* no visible key: O = 0, LSE = -inf */
    for (int64_t d = 0; d < p.head_dim_v; ++d) store(o, oo + d * o.strides[3], 0.0);
    ((float*)lse.data)[row_at(lse, h, r)] = -INFINITY;
    return;
  }
  for (int64_t d = 0; d < p.head_dim_v; ++d) a[d] = 0;
  for (int64_t j = 0; j < end; ++j) {
    const int64_t ko = key_at(p, k, b, hk, j), vo = key_at(p, v, b, hk, j);
    if (ko < 0) continue;
    const double w = exp(score(p, q, k, qo, ko, &t) - m);
    sum += w;
    for (int64_t d = 0; d < p.head_dim_v; ++d) a[d] += w * load(v, vo + d * v.strides[3]);
  }
  for (int64_t d = 0; d < p.head_dim_v; ++d) store(o, oo + d * o.strides[3], a[d] / sum);
  ((float*)lse.data)[row_at(lse, h, r)] = (float)(m + log(sum));
}

#ifdef VARLEN_PLUGIN_BUG_WRITES_TAIL
/* The planted bug: O's rows from the end of the last sequence to total_q zeroed. */
static __global__ void zero_tail(af_problem p, af_tensor o, int64_t first) {
  const int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, per_row = p.heads_q * p.head_dim_v;
  if (x >= (p.total_q - first) * per_row) return;
  const int64_t r = first + x / per_row, h = x % per_row / p.head_dim_v, d = x % p.head_dim_v;
  store(o, row_at(o, h, r) + d * o.strides[3], 0.0);
}
#endif

/* Per query row: dQ, and D = rowsum(dO * O) into Drow (per packed row and head) for the keys. gq:
 * Dqk doubles of scratch per packed row and head. */
static __global__ void backward_rows(af_problem p, int mode, const int64_t* shift, af_tensor q, af_tensor k, af_tensor v, af_tensor o,
                                     af_tensor lse, af_tensor d_o, af_tensor d_lse, int has_dlse, af_tensor dq, double* gq_all,
                                     double* Drow) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
  if (i >= p.seqused_q_device[b]) return;
  const int64_t hk = h / (p.heads_q / p.heads_kv), r = p.cu_seqlens_q_device[b] + i;
  const int64_t end = keys_seen(mode, i, p.seqused_kv_device[b], shift[b]), qo = row_at(q, h, r);
  const int64_t go = row_at(d_o, h, r), oo = row_at(o, h, r);
  const double L = load_f32(lse, row_at(lse, h, r)), g = has_dlse ? load_f32(d_lse, row_at(d_lse, h, r)) : 0.0;
  double* gq = gq_all + (r * p.heads_q + h) * p.head_dim_qk;
  double D = 0, t;
  for (int64_t d = 0; d < p.head_dim_qk; ++d) gq[d] = 0;
  if (L != -INFINITY) { /* a fully masked row has no gradient */
    for (int64_t d = 0; d < p.head_dim_v; ++d) D += load(d_o, go + d * d_o.strides[3]) * load(o, oo + d * o.strides[3]);
    for (int64_t j = 0; j < end; ++j) {
      const int64_t ko = key_at(p, k, b, hk, j), vo = key_at(p, v, b, hk, j);
      if (ko < 0) continue; /* no such key in the buffer */
      const double s = score(p, q, k, qo, ko, &t), P = exp(s - L);
      double dP = 0, dS;
      if (P == 0) continue; /* no weight */
      for (int64_t d = 0; d < p.head_dim_v; ++d) dP += load(d_o, go + d * d_o.strides[3]) * load(v, vo + d * v.strides[3]);
      dS = P * (dP - D + g);
      if (p.has_softcap) dS *= 1 - t * t;
      for (int64_t d = 0; d < p.head_dim_qk; ++d) gq[d] += dS * load(k, ko + d * k.strides[3]);
    }
  }
  Drow[r * p.heads_q + h] = D;
  for (int64_t d = 0; d < p.head_dim_qk; ++d) store(dq, row_at(dq, h, r) + d * dq.strides[3], p.scale * gq[d]);
}

/* Key j of sequence b = blockIdx.z, kv head hk = blockIdx.y: dK and dV summed over the queries of
 * its sequence that see it and the query heads of its group, P recomputed from the LSE. gk, gv:
 * Dqk and Dv doubles of scratch per packed key row and kv head. */
static __global__ void backward_keys(af_problem p, int mode, const int64_t* shift, af_tensor q, af_tensor k, af_tensor v, af_tensor lse,
                                     af_tensor d_o, af_tensor d_lse, int has_dlse, af_tensor dk, af_tensor dv, const double* Drow,
                                     double* gk_all, double* gv_all) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int64_t lk = p.seqused_kv_device[b];
  if (j >= lk) return;
  const int64_t lq = p.seqused_q_device[b], sh = shift[b], group = p.heads_q / p.heads_kv, rk = p.cu_seqlens_kv_device[b] + j;
  const int64_t ko = key_at(p, k, b, hk, j), vo = key_at(p, v, b, hk, j);
  double *gk = gk_all + (rk * p.heads_kv + hk) * p.head_dim_qk, *gv = gv_all + (rk * p.heads_kv + hk) * p.head_dim_v, t;
  for (int64_t d = 0; d < p.head_dim_qk; ++d) gk[d] = 0;
  for (int64_t d = 0; d < p.head_dim_v; ++d) gv[d] = 0;
  for (int64_t h = hk * group; ko >= 0 && h < (hk + 1) * group; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      if (j >= keys_seen(mode, i, lk, sh)) continue; /* query i does not see key j */
      const int64_t r = p.cu_seqlens_q_device[b] + i, qo = row_at(q, h, r), go = row_at(d_o, h, r);
      const double L = load_f32(lse, row_at(lse, h, r));
      if (L == -INFINITY) continue; /* a fully masked row has no gradient */
      const double s = score(p, q, k, qo, ko, &t), P = exp(s - L);
      double dP = 0, dS;
      if (P == 0) continue;
      for (int64_t d = 0; d < p.head_dim_v; ++d) dP += load(d_o, go + d * d_o.strides[3]) * load(v, vo + d * v.strides[3]);
      dS = P * (dP - Drow[r * p.heads_q + h] + (has_dlse ? load_f32(d_lse, row_at(d_lse, h, r)) : 0.0));
      if (p.has_softcap) dS *= 1 - t * t;
      for (int64_t d = 0; d < p.head_dim_qk; ++d) gk[d] += dS * load(q, qo + d * q.strides[3]);
      for (int64_t d = 0; d < p.head_dim_v; ++d) gv[d] += P * load(d_o, go + d * d_o.strides[3]);
    }
  for (int64_t d = 0; d < p.head_dim_qk; ++d) store(dk, row_at(dk, hk, rk) + d * dk.strides[3], p.scale * gk[d]);
  for (int64_t d = 0; d < p.head_dim_v; ++d) store(dv, row_at(dv, hk, rk) + d * dv.strides[3], gv[d]);
}

/* ---- the entry points ---- */

static int supports(const af_problem* p, char* msg, size_t len) {
  if (p->dtype != AF_F32 && p->dtype != AF_F16 && p->dtype != AF_BF16) return fail(msg, len, "fp32, fp16 and bf16 only");
  if (!p->cu_seqlens_q || !p->seqused_q) return fail(msg, len, "no varlen interface in the problem (an attnfuzz older than ABI 3?)");
  if (mask_mode_host(p) == MASK_OTHER)
    return fail(msg, len, "declines the mask: neither none nor causal aligned bottom-right in every sequence");
  return 0;
}

namespace {  // internal linkage for the struct's members too: nothing but the entry points is exported
/* Device scratch of one call, freed together. */
struct Scratch {
  enum { kMax = 8 };
  void* ptr[kMax] = {};
  int n = 0;
  cudaError_t alloc(void** out, size_t bytes) {
    if (n == kMax) return cudaErrorMemoryAllocation;
    cudaError_t e = cudaMalloc(out, bytes + 8); /* never 0 bytes: an empty part of a composition */
    if (e == cudaSuccess) ptr[n++] = *out;
    return e;
  }
  ~Scratch() {
    for (int i = 0; i < n; ++i) cudaFree(ptr[i]);
  }
};
}  // namespace

/* A launch of max_rows threads per (head, sequence): at least one block. */
static dim3 grid(int64_t max_rows, int64_t heads, int64_t batch) {
  return dim3(max_rows > 0 ? (unsigned)((max_rows + 127) / 128) : 1u, (unsigned)heads, (unsigned)batch);
}

/* Waits for the kernels: a launch or execution error is this call's error. */
static int finish(char* msg, size_t len, const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return e == cudaSuccess ? 0 : fail_cuda(msg, len, what, e);
}

/* What forward() and backward() share: the interface's checks, the device, each sequence's
 * diagonal on the device (*shift) and the mask's mode, classified from mask_device. *call is the
 * problem the kernels get: paged exactly where the host's page table says so. */
static int prepare(const af_problem* p, const af_tensor* q, Scratch& mem, af_problem* call, int64_t** shift, int* mode, char* msg,
                   size_t len) {
  int ok[2] = {1, 1};
  int* ok_device = NULL;
  int64_t* host = NULL;
  cudaError_t e;
  if (p->dtype != AF_F32 && p->dtype != AF_F16 && p->dtype != AF_BF16) return fail(msg, len, "fp32, fp16 and bf16 only");
  if (!p->cu_seqlens_q_device || !p->cu_seqlens_kv_device || !p->seqused_q_device || !p->seqused_kv_device || !p->mask_device)
    return fail(msg, len, "no varlen interface or mask in GPU memory (an attnfuzz older than ABI 3?)");
  if (p->page_table && (!p->page_table_device || p->page_size <= 0 || p->pages_per_seq <= 0))
    return fail(msg, len, "a page table without its GPU twin, its page size or its columns");
  *call = *p;
  if (!p->page_table) call->page_table_device = NULL;
  if (p->heads_kv <= 0 || p->heads_q % p->heads_kv != 0) return fail(msg, len, "heads_q is not a multiple of heads_kv");
  host = (int64_t*)malloc(sizeof(int64_t) * (size_t)(p->batch + 1));
  if (!host) return fail(msg, len, "out of memory");
  for (int64_t b = 0; b < p->batch; ++b) host[b] = causal_shift(p, b);
  e = cudaSetDevice(q->device_index);
  if (e == cudaSuccess) e = mem.alloc((void**)shift, sizeof(int64_t) * (size_t)p->batch);
  if (e == cudaSuccess) e = cudaMemcpy(*shift, host, sizeof(int64_t) * (size_t)p->batch, cudaMemcpyHostToDevice);
  free(host);
  if (e == cudaSuccess) e = mem.alloc((void**)&ok_device, sizeof ok);
  if (e == cudaSuccess) e = cudaMemcpy(ok_device, ok, sizeof ok, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return fail_cuda(msg, len, "setup", e);
  const int64_t rows = p->batch * p->heads_q * p->seq_q;
  classify_mask<<<rows > 0 ? (unsigned)((rows + 127) / 128) : 1u, 128>>>(*call, *shift, ok_device);
  if (finish(msg, len, "the mask's classification")) return 1;
  e = cudaMemcpy(ok, ok_device, sizeof ok, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return fail_cuda(msg, len, "the mask's classification", e);
  *mode = ok[0] ? MASK_NONE : ok[1] ? MASK_CAUSAL : MASK_OTHER;
  if (*mode == MASK_OTHER)
    return fail(msg, len, "declines the mask: neither none nor causal aligned bottom-right in every sequence (mask_device)");
  return 0;
}

static int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse, char* msg,
                   size_t len) {
  Scratch mem;
  af_problem call;
  int64_t* shift = NULL;
  double* acc = NULL;
  int mode = MASK_OTHER;
  if (prepare(p, q, mem, &call, &shift, &mode, msg, len)) return 1;
  cudaError_t e = mem.alloc((void**)&acc, sizeof(double) * (size_t)(p->total_q * p->heads_q * p->head_dim_v));
  if (e != cudaSuccess) return fail_cuda(msg, len, "forward setup", e);
  forward_rows<<<grid(p->max_seqlen_q, p->heads_q, p->batch), 128>>>(call, mode, shift, *q, *k, *v, *o, *lse, acc);
  if (finish(msg, len, "forward")) return 1;
#ifdef VARLEN_PLUGIN_BUG_WRITES_TAIL
  const int64_t first = p->cu_seqlens_q[p->batch], n = (p->total_q - first) * p->heads_q * p->head_dim_v;
  if (n > 0) {
    zero_tail<<<(unsigned)((n + 127) / 128), 128>>>(call, *o, first);
    if (finish(msg, len, "forward (tail)")) return 1;
  }
#endif
  return 0;
}

static int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o,
                    const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv,
                    char* msg, size_t len) {
  Scratch mem;
  af_problem call;
  int64_t* shift = NULL;
  double *gq = NULL, *Drow = NULL, *gkv = NULL;
  af_tensor no_dlse = {};
  int mode = MASK_OTHER;
  if (p->page_table) return fail(msg, len, "backward() was handed a page table");
  if (prepare(p, q, mem, &call, &shift, &mode, msg, len)) return 1;
  const size_t rows = (size_t)(p->total_q * p->heads_q), keys = (size_t)(p->total_kv * p->heads_kv);
  cudaError_t e = mem.alloc((void**)&gq, sizeof(double) * rows * (size_t)p->head_dim_qk);
  if (e == cudaSuccess) e = mem.alloc((void**)&Drow, sizeof(double) * rows);
  if (e == cudaSuccess) e = mem.alloc((void**)&gkv, sizeof(double) * keys * (size_t)(p->head_dim_qk + p->head_dim_v));
  if (e != cudaSuccess) return fail_cuda(msg, len, "backward setup", e);
  const af_tensor g = d_lse ? *d_lse : no_dlse;
  backward_rows<<<grid(p->max_seqlen_q, p->heads_q, p->batch), 128>>>(call, mode, shift, *q, *k, *v, *o, *lse, *d_o, g, d_lse != NULL,
                                                                       *dq, gq, Drow);
  if (finish(msg, len, "backward (query rows)")) return 1;
  backward_keys<<<grid(p->max_seqlen_kv, p->heads_kv, p->batch), 128>>>(call, mode, shift, *q, *k, *v, *lse, *d_o, g, d_lse != NULL, *dk,
                                                                        *dv, Drow, gkv, gkv + keys * (size_t)p->head_dim_qk);
  return finish(msg, len, "backward (key rows)");
}

static const af_plugin plugin = {
    ATTNFUZZ_PLUGIN_ABI_VERSION,
    VARLEN_CUDA_NAME,
    "1.0",
    AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO | AF_DEVICE_IS_CUDA | AF_TAKES_PACKED | AF_TAKES_PAGED_KV,
    "{\"fp32\":\"fp32\",\"fp16\":\"fp16\",\"bf16\":\"bf16\"}",
    supports,
    forward,
    backward,
};

/* nvcc compiles C++: the exported functions need C linkage. */
extern "C" uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
extern "C" const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
extern "C" const char* attnfuzz_plugin_envelope(void) { return "{\"masks\": \"causal_or_none\"}"; }
