/* attnfuzz plugin ABI, version 3 (attnfuzz still loads version 1 and 2 plugins).
 *
 * A plugin is a shared library that exports two C functions:
 *
 *   uint32_t attnfuzz_plugin_abi_version(void);      returns ATTNFUZZ_PLUGIN_ABI_VERSION
 *   const af_plugin* attnfuzz_plugin_get(void);      the plugin's description and entry points
 *
 * and may export two optional ones (any ABI version; a plugin without them loads as before):
 *
 *   const char* attnfuzz_plugin_envelope(void);      JSON: what the plugin accepts for sure
 *   const char* attnfuzz_plugin_api(void);           the API it implements (see below)
 *
 * The envelope (docs/plugins.md, "Support envelope") is an object with any of the keys of
 * `attnfuzz list --json`'s envelopes, e.g. {"dtypes": ["bf16"], "max_head_dim": 128,
 * "head_dim_multiple": 8, "masks": "causal_or_none", "alignment_bytes": 16}; a key left out is
 * unrestricted, an unknown key or a bad value refuses the plugin at load. Campaigns aim most
 * cases inside it and a measured share just outside one clause; supports() still has the last
 * word on every call. Without it, campaigns aim at the dtypes of contract_json only.
 *
 * The API is the name of a public function whose implementations promise each other the same
 * numerics (say "mylib.attention", implemented by a fused and an unfused plugin): passing
 * backends of one API and one contract whose precision fingerprints differ are a `consistency`
 * finding (docs/verdicts.md). Backends of no API, or of different ones, are never compared so.
 *
 * The harness loads it with `--backends plugin:/path/libx.so`, refuses any other ABI
 * version, and calls it like every other backend. Plain C: no C++ types cross the boundary.
 *
 * Tensors are described by pointer, dtype, device, shape and strides (in elements), so a
 * plugin must honour strides: each tensor comes in the layout the case asks (any order
 * of B, H, S, padded rows and heads, a data pointer not 16-byte aligned, packed views). Inputs arrive in the case dtype (fp16/bf16 as their
 * 16-bit patterns). O, dQ, dK, dV are written in the case dtype, LSE in float32 (natural
 * log, -inf on fully masked rows). The harness fills every output with a poison pattern
 * before each call; an element left holding it is reported as unwritten.
 *
 * A plugin with AF_DEVICE_IS_CUDA gets every tensor in GPU memory on the device it runs on
 * (same shapes, strides and dtypes), and the mask in GPU memory too (mask_device, version 2).
 *
 * Ragged batches through the varlen interface (version 3, AF_TAKES_PACKED; docs/plugins.md,
 * "Ragged batches: the varlen interface"). Sequence b of the call has seqused_q[b] queries and
 * seqused_kv[b] keys. Every tensor is packed, token-major (THD), with no batch dimension:
 *
 *   Q, dO, O, dQ    logical [1][Hq][total_q][D]    strides {total_q*Hq*D, D, Hq*D, 1}
 *   K, V, dK, dV    logical [1][Hkv][total_kv][D]  strides {total_kv*Hkv*D, D, Hkv*D, 1}
 *   LSE, dLSE       logical [1][Hq][total_q]       strides {Hq*total_q, total_q, 1}   (float32)
 *
 *   query i of sequence b is row  cu_seqlens_q[b] + i,   0 <= i < seqused_q[b]
 *   key   j of sequence b is row  cu_seqlens_kv[b] + j,  0 <= j < seqused_kv[b]
 *
 * cu_seqlens_x[b + 1] - cu_seqlens_x[b] - seqused_x[b] rows of gap follow sequence b (b < B - 1),
 * and total_x - cu_seqlens_x[B] rows of tail follow the last one. In the inputs those rows hold
 * NaN; in the outputs they hold the poison and must still hold it after the call (a write there
 * is an out_of_bounds finding). With `misaligned` every packed buffer (and page pool) starts one
 * element past its allocation's alignment. The mask is the mask above ([B][Hq][seq_q][seq_kv],
 * sequence b's query i and key j at [b][h][i][j]). Every row of every sequence must be written;
 * the loader unpacks the outputs into the padded tensors with O = 0, LSE = -inf and zero
 * gradients past each sequence's rows and keys.
 *
 * Paged K and V (version 3, AF_TAKES_PAGED_KV with AF_TAKES_PACKED), in forward() only and only
 * where the case has pages (page_table not NULL): K and V are page pools,
 *
 *   K, V            logical [num_pages][Hkv][page_size][D]  strides {page_size*Hkv*D, D, Hkv*D, 1}
 *   key j of sequence b is row  j % page_size  of page  page_table[b * pages_per_seq + j / page_size]
 *
 * seqused_kv[b] is sequence b's keys; cu_seqlens_kv and total_kv describe the packed K and V that
 * backward() gets (it has no page table).
 *
 * Every entry point returns 0 on success, or non-zero with a NUL-terminated message in
 * `msg` (at most msg_len bytes including the NUL).
 *
 * Versions: 1 had no af_problem.mask_device. Version 2 only appends that field, so a plugin
 * built against version 1 reads the same layout. Version 3 appends the sequence lengths, the
 * varlen interface and the page table after it (zero and NULL for a plugin of version 1 or 2,
 * which gets a ragged batch padded, as before) and the flags AF_TAKES_PACKED and
 * AF_TAKES_PAGED_KV (a plugin of version 1 or 2 that sets them is refused at load). A plugin may
 * define ATTNFUZZ_PLUGIN_ABI_VERSION to 1u or 2u before including this header to build for that
 * version.
 */
#ifndef ATTNFUZZ_PLUGIN_H
#define ATTNFUZZ_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ATTNFUZZ_PLUGIN_ABI_VERSION
#define ATTNFUZZ_PLUGIN_ABI_VERSION 3u
#endif

typedef enum af_dtype { AF_F32 = 0, AF_F16 = 1, AF_BF16 = 2, AF_F64 = 3 } af_dtype;
typedef enum af_device { AF_CPU = 0, AF_CUDA = 1 } af_device;

typedef struct af_tensor {
  void* data;
  int32_t dtype;  /* af_dtype */
  int32_t device; /* af_device; for AF_CUDA, data is a device pointer on device_index */
  int32_t device_index;
  int32_t ndim; /* 4 for Q, K, V, O and gradients ([B][H][S][D]); 3 for LSE ([B][H][S]); packed: see above */
  int64_t shape[4];
  int64_t strides[4]; /* in elements, for the logical [B][H][S][D] (or [B][H][S]) indices */
} af_tensor;

/* One attention call. The mask is given twice: as the case's expression (JSON, the
 * "mask" syntax of attnfuzz-case/1, evaluated at (q + q_offset, kv + kv_offset) in a
 * full_seq_q x full_seq_kv problem, and-ed with the band restrictions), and materialized. */
typedef struct af_problem {
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v;
  int32_t dtype; /* af_dtype of Q, K, V, dO and of O, dQ, dK, dV */
  int32_t has_softcap;
  double scale;
  double softcap;
  const char* mask_json;
  const char* restrictions_json; /* JSON array of {"left","right","align","inside"} */
  int64_t q_offset, kv_offset, full_seq_q, full_seq_kv;
  const uint8_t* mask; /* host memory, [B][Hq][Sq][Skv] contiguous, 1 = visible */
  /* Version 2: the same mask in GPU memory, on the device the tensors are on, for plugins
   * with AF_DEVICE_IS_CUDA in forward() and backward(); NULL otherwise (and in supports()). */
  const uint8_t* mask_device;

  /* Version 3 (every field zero or NULL for a plugin of version 1 or 2). */
  /* A ragged batch: sequence b's queries and keys in the whole problem (the coordinates of
   * mask_json; this call's part of sequence b is its first clamp(lens_q[b] - q_offset, 0, seq_q)
   * rows and clamp(lens_kv[b] - kv_offset, 0, seq_kv) keys). Host memory [B], supports() too;
   * NULL for a dense batch (every sequence full_seq_q x full_seq_kv). */
  const int64_t* lens_q;
  const int64_t* lens_kv;
  /* AF_TAKES_PACKED (NULL and 0 otherwise): the varlen interface, in supports(), forward() and
   * backward() alike, for ragged and dense batches. cu_seqlens_x: [B + 1] each sequence's first
   * row in the packed tensors, the last entry the end of the last sequence (the gap after every
   * sequence but the last counted, the tail not). seqused_x: [B] each sequence's rows (this call's part).
   * Host memory; the _device twins are the same in GPU memory for AF_DEVICE_IS_CUDA plugins in
   * forward() and backward() (NULL otherwise). */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_kv;
  const int32_t* seqused_q;
  const int32_t* seqused_kv;
  const int32_t* cu_seqlens_q_device;
  const int32_t* cu_seqlens_kv_device;
  const int32_t* seqused_q_device;
  const int32_t* seqused_kv_device;
  int64_t total_q, total_kv; /* rows of the packed tensors: sequences, gaps and tail */
  /* Upper bounds of seqused_x as a varlen kernel is told them: the longest sequence of the call
   * (at least 1) plus the case's slack (ragged.max_slack). */
  int64_t max_seqlen_q, max_seqlen_kv;
  int32_t misaligned; /* 1: every packed buffer and page pool starts one element past its alignment */
  int32_t reserved;   /* 0: the padding before the next int64_t, named */
  /* AF_TAKES_PAGED_KV, where the case has pages, in supports() and forward(); 0 and NULL in
   * backward() and otherwise. page_table: [B][pages_per_seq] physical page of each sequence's
   * pages in order, -1 past a sequence's last page; pages_per_seq >= 1. The pool has num_pages
   * pages: every sequence's own and one spare page, in an order drawn from the case's seed; rows
   * past a sequence's last key and the spare page hold NaN. Host memory, and page_table_device
   * in GPU memory for AF_DEVICE_IS_CUDA plugins in forward(). */
  int64_t page_size, num_pages, pages_per_seq;
  const int32_t* page_table;
  const int32_t* page_table_device;
} af_problem;

enum {
  AF_BACKWARD_TAKES_DLSE = 1u << 0, /* backward() honours d_lse; otherwise the harness adds the term */
  AF_MASKED_ROWS_ZERO = 1u << 1,    /* fully masked rows give O = 0, LSE = -inf, zero gradients */
  AF_DEVICE_IS_CUDA = 1u << 2,      /* tensors (and, version 2, the mask) are handed over on the GPU */
  /* Outputs that may legitimately differ bitwise between two runs on identical inputs (a
   * backward that accumulates dK and dV with atomic adds, in whatever order the blocks finish).
   * Every run of them is still judged against the reference; the determinism check (every
   * backend run twice on some cases) does not report them. Every output not declared must
   * repeat bit for bit. New bits of version 2 (nothing else changed): a plugin that sets none
   * is held to bitwise repeatability, as before. */
  AF_NONDETERMINISTIC_O = 1u << 3,
  AF_NONDETERMINISTIC_LSE = 1u << 4,
  AF_NONDETERMINISTIC_DQ = 1u << 5,
  AF_NONDETERMINISTIC_DK = 1u << 6,
  AF_NONDETERMINISTIC_DV = 1u << 7,
  /* The plugin computes on the GPU although its tensors come in host memory (it copies them
   * itself): the harness treats it as a GPU backend, as it does one with AF_DEVICE_IS_CUDA
   * (GPU oracles, the real tier and aimed cases by default, refused on a machine without a
   * usable GPU). A new bit of version 2, like the ones above. */
  AF_COMPUTES_ON_GPU = 1u << 8,
  /* The plugin promises batch invariance: each (batch, head) problem gives the same bits
   * whatever else shares the call (no work split, tile size or reduction order chosen by the
   * batch size). The harness then runs some cases again inside a larger batch and reports any
   * bit that moved as a `batch_variant` finding (outputs declared AF_NONDETERMINISTIC_* are
   * exempt). A new bit of version 2, like the ones above. */
  AF_BATCH_INVARIANT = 1u << 9,
  /* Version 3. The plugin takes ragged batches through the varlen interface (above): packed
   * tensors with cu_seqlens, seqused and max_seqlen, for every batch, ragged or dense. Implies
   * the envelope's "ragged": true. */
  AF_TAKES_PACKED = 1u << 10,
  /* Version 3, with AF_TAKES_PACKED: forward() takes K and V as page pools with a page table
   * wherever the case has pages (ragged.page_size > 0); backward() takes them packed. */
  AF_TAKES_PAGED_KV = 1u << 11
};

typedef struct af_plugin {
  uint32_t abi_version; /* ATTNFUZZ_PLUGIN_ABI_VERSION, the same as attnfuzz_plugin_abi_version() returns */
  const char* name;
  const char* version;
  uint32_t flags;
  /* Numerics contract per input dtype, as JSON: {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}.
   * Contracts: "fp64", "fp32" (strict), "tf32" (fp32 inputs, matmul operands rounded to TF32),
   * "tf32x3" (fp32 inputs, every matmul as three TF32 products: CUTLASS's 3xTF32, Triton's tf32x3),
   * "fp16" / "bf16" (operands in that type, fp32 accumulation, P and dS rounded to it).
   * A dtype left out is not supported. */
  const char* contract_json;
  /* 0 when the plugin can run the problem; otherwise the reason in msg. May be NULL (all supported). */
  int (*supports)(const af_problem* p, char* msg, size_t msg_len);
  int (*forward)(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse, char* msg,
                 size_t msg_len);
  /* d_lse is float32 [B][Hq][Sq] (packed: laid out as LSE); plugins without AF_BACKWARD_TAKES_DLSE get NULL. */
  int (*backward)(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o, const af_tensor* lse,
                  const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv, char* msg, size_t msg_len);
} af_plugin;

typedef uint32_t (*af_abi_version_fn)(void);
typedef const af_plugin* (*af_plugin_get_fn)(void);
typedef const char* (*af_plugin_envelope_fn)(void);
typedef const char* (*af_plugin_api_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* ATTNFUZZ_PLUGIN_H */
