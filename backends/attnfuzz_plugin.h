/* attnfuzz plugin ABI, version 2 (attnfuzz still loads version 1 plugins).
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
 * Every entry point returns 0 on success, or non-zero with a NUL-terminated message in
 * `msg` (at most msg_len bytes including the NUL).
 *
 * Versions: 1 had no af_problem.mask_device. Version 2 only appends that field, so a plugin
 * built against version 1 reads the same layout. A plugin may define
 * ATTNFUZZ_PLUGIN_ABI_VERSION to 1u before including this header to build for version 1.
 */
#ifndef ATTNFUZZ_PLUGIN_H
#define ATTNFUZZ_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ATTNFUZZ_PLUGIN_ABI_VERSION
#define ATTNFUZZ_PLUGIN_ABI_VERSION 2u
#endif

typedef enum af_dtype { AF_F32 = 0, AF_F16 = 1, AF_BF16 = 2, AF_F64 = 3 } af_dtype;
typedef enum af_device { AF_CPU = 0, AF_CUDA = 1 } af_device;

typedef struct af_tensor {
  void* data;
  int32_t dtype;  /* af_dtype */
  int32_t device; /* af_device; for AF_CUDA, data is a device pointer on device_index */
  int32_t device_index;
  int32_t ndim; /* 4 for Q, K, V, O and gradients ([B][H][S][D]); 3 for LSE ([B][H][S]) */
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
  AF_BATCH_INVARIANT = 1u << 9
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
  /* d_lse is float32 [B][Hq][Sq]; plugins without AF_BACKWARD_TAKES_DLSE get NULL. */
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
