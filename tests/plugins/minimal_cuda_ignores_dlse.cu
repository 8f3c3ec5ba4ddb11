/* The minimal CUDA plugin with the FlexAttention bug planted from outside: its backward
 * drops dLSE while the plugin still declares AF_BACKWARD_TAKES_DLSE. The harness must find it
 * on the GPU (dQ and dK wrong through LSE merges and wherever dLSE != 0), as it finds the CPU
 * mutant ignores_dlse. The documented source is included unchanged; only its two exported
 * functions are renamed so that this file can export its own table. */
#define attnfuzz_plugin_abi_version minimal_cuda_abi_version
#define attnfuzz_plugin_get minimal_cuda_get
#include "minimal_cuda_plugin.cu"
#undef attnfuzz_plugin_abi_version
#undef attnfuzz_plugin_get

static int backward_ignoring_dlse(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v,
                                  const af_tensor* o, const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse,
                                  af_tensor* dq, af_tensor* dk, af_tensor* dv, char* msg, size_t len) {
  (void)d_lse;  // MUTANT: the dLSE term is dropped
  return backward(p, q, k, v, o, lse, d_o, NULL, dq, dk, dv, msg, len);
}

static const af_plugin mutant = {ATTNFUZZ_PLUGIN_ABI_VERSION, "minimal_cuda_ignores_dlse", "1.0", plugin.flags,
                                 plugin.contract_json, supports, forward, backward_ignoring_dlse};

extern "C" uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
extern "C" const af_plugin* attnfuzz_plugin_get(void) { return &mutant; }
