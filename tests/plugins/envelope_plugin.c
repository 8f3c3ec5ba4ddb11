/* A plugin that declares its support envelope (attnfuzz_plugin_envelope, attnfuzz_plugin.h):
 * bf16 and fp16 with head dims up to 64 in steps of 8, no mask or causal; its contract has
 * fp32 and bf16, so the harness aims at bf16 only. It only loads: forward and backward fail.
 * Built twice, the second time with an envelope that names an unknown key (ENVELOPE_BAD), which
 * the loader must refuse with one clear line (tests/test_mutant_zoo.cpp, PluginLoader). */
#include <stdio.h>

#include "attnfuzz_plugin.h"

static int loads_only(char* msg, size_t len) {
  snprintf(msg, len, "envelope plugin: loads only, runs nothing");
  return 1;
}
static int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse,
                   char* msg, size_t len) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse;
  return loads_only(msg, len);
}
static int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o,
                    const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv,
                    char* msg, size_t len) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)d_o, (void)d_lse, (void)dq, (void)dk, (void)dv;
  return loads_only(msg, len);
}

static const af_plugin plugin = {ATTNFUZZ_PLUGIN_ABI_VERSION, "envelope", "1.0", AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO,
                                 "{\"fp32\":\"fp32\",\"bf16\":\"bf16\"}", NULL, forward, backward};

uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
const char* attnfuzz_plugin_envelope(void) {
#ifdef ENVELOPE_BAD
  return "{\"dtypes\": [\"bf16\"], \"max_headdim\": 64}";
#else
  return "{\"dtypes\": [\"bf16\", \"fp16\"], \"max_head_dim\": 64, \"head_dim_multiple\": 8, \"masks\": \"causal_or_none\"}";
#endif
}
