/* The minimal CUDA plugin with a device fault planted from outside: when Skv % 7 == 3 its
 * forward first launches a kernel that writes through a bad pointer (an illegal address, a
 * sticky error that leaves the process's CUDA context unusable). The harness must pin the
 * fault on this plugin, replace the worker and go on with the campaign. */
#define attnfuzz_plugin_abi_version minimal_cuda_abi_version
#define attnfuzz_plugin_get minimal_cuda_get
#include "minimal_cuda_plugin.cu"
#undef attnfuzz_plugin_abi_version
#undef attnfuzz_plugin_get

static __global__ void write_through(int* bad) { *bad = 1; }

static int forward_faulting(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o,
                            af_tensor* lse, char* msg, size_t len) {
  if (p->seq_kv % 7 == 3) write_through<<<1, 1>>>((int*)16);  // MUTANT: an illegal address
  return forward(p, q, k, v, o, lse, msg, len);
}

static const af_plugin mutant = {ATTNFUZZ_PLUGIN_ABI_VERSION, "minimal_cuda_faults", "1.0", plugin.flags, plugin.contract_json,
                                 supports, forward_faulting, backward};

extern "C" uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
extern "C" const af_plugin* attnfuzz_plugin_get(void) { return &mutant; }
