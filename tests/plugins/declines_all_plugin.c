/* A plugin that declines every problem, with a reason that names the head dimension: a
 * campaign or check that names it tested nothing, and must say so (coverage, issue 15). */
#include <stdio.h>

#include "attnfuzz_plugin.h"

static int supports(const af_problem* p, char* msg, size_t len) {
  snprintf(msg, len, "declines_all plugin: no kernel for head_dim_qk %lld", (long long)p->head_dim_qk);
  return 1;
}

static int never(char* msg, size_t len) {
  snprintf(msg, len, "declines_all plugin: declined in supports(), so never called");
  return 1;
}
static int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse,
                   char* msg, size_t len) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse;
  return never(msg, len);
}
static int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o,
                    const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv,
                    char* msg, size_t len) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)d_o, (void)d_lse, (void)dq, (void)dk, (void)dv;
  return never(msg, len);
}

static const af_plugin plugin = {ATTNFUZZ_PLUGIN_ABI_VERSION, "declines_all", "1.0", AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO,
                                 "{\"fp32\":\"fp32\",\"fp16\":\"fp16\",\"bf16\":\"bf16\"}", supports, forward, backward};

uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
