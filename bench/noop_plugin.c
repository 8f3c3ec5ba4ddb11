/* noop_plugin.c: a plugin that computes nothing (zeros, LSE = 0), for bench_python_bridge: the
 * in-process baseline the Python bridge's per-call overhead is measured against. */
#include <stdint.h>
#include <string.h>

#include "attnfuzz_plugin.h"

static size_t size_of(const af_tensor* t) { return t->dtype == AF_F32 ? 4 : 2; }

/* Zeros into every logical element (strides honoured); 0 is all-zero bits in every dtype. */
static void zero(af_tensor* t) {
  const int64_t w = t->ndim == 4 ? t->shape[3] : 1, sd = t->ndim == 4 ? t->strides[3] : 0;
  for (int64_t b = 0; b < t->shape[0]; ++b)
    for (int64_t h = 0; h < t->shape[1]; ++h)
      for (int64_t s = 0; s < t->shape[2]; ++s)
        for (int64_t d = 0; d < w; ++d)
          memset((char*)t->data + (b * t->strides[0] + h * t->strides[1] + s * t->strides[2] + d * sd) * (int64_t)size_of(t), 0,
                 size_of(t));
}

static int forward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse,
                   char* msg, size_t len) {
  (void)p, (void)q, (void)k, (void)v, (void)msg, (void)len;
  zero(o);
  zero(lse);
  return 0;
}

static int backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o,
                    const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv,
                    char* msg, size_t len) {
  (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)d_o, (void)d_lse, (void)msg, (void)len;
  zero(dq);
  zero(dk);
  zero(dv);
  return 0;
}

static const af_plugin plugin = {ATTNFUZZ_PLUGIN_ABI_VERSION, "noop", "1.0", AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO,
                                 "{\"fp32\":\"fp32\",\"fp16\":\"fp16\",\"bf16\":\"bf16\"}", NULL, forward, backward};

uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
