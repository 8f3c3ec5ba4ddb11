/* A plugin that declares AF_DEVICE_IS_CUDA, built without CUDA: a build of attnfuzz without
 * the CUDA runtime (the cpu preset) must decline it with its reason, never call it. */
#include <stdio.h>

#include "attnfuzz_plugin.h"

static int host_call(char* msg, size_t len) {
  snprintf(msg, len, "cuda_declared plugin: called although no GPU memory was handed over");
  return 1;
}
static int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse,
                   char* msg, size_t len) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse;
  return host_call(msg, len);
}
static int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o,
                    const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv,
                    char* msg, size_t len) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)d_o, (void)d_lse, (void)dq, (void)dk, (void)dv;
  return host_call(msg, len);
}

static const af_plugin plugin = {ATTNFUZZ_PLUGIN_ABI_VERSION, "cuda_declared", "1.0", AF_DEVICE_IS_CUDA,
                                 "{\"fp32\":\"fp32\",\"fp16\":\"fp16\",\"bf16\":\"bf16\"}", NULL, forward, backward};

uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
