/* atomic_order_plugin.c: the documented minimal plugin with a backward whose dK and dV differ
 * in their last bit from run to run, as a backward accumulating them with atomic adds does
 * (the order in which the blocks finish decides the rounding). Still well within the fp32
 * contract: each element is off by at most one ulp.
 *
 * Built twice (tests/plugins/CMakeLists.txt): with ATTNFUZZ_DECLARE_NONDETERMINISM=1 it sets
 * AF_NONDETERMINISTIC_DK | AF_NONDETERMINISTIC_DV (no determinism finding may be reported),
 * with 0 it declares nothing (the determinism check must report dK and dV). */
#include <math.h>

/* The minimal plugin itself, its two exports renamed: this file exports its own. */
#define attnfuzz_plugin_get minimal_plugin_get
#define attnfuzz_plugin_abi_version minimal_plugin_abi_version
#include "minimal_plugin.c"
#undef attnfuzz_plugin_get
#undef attnfuzz_plugin_abi_version

#ifndef ATTNFUZZ_DECLARE_NONDETERMINISM
#error "define ATTNFUZZ_DECLARE_NONDETERMINISM to 0 or 1"
#endif

static uint64_t backward_calls;

/* Whether element i of this call gets its last bit moved: a hash of (call, i), so two runs of
 * a whole composition (calls 1..k, then k+1..2k) move different elements. */
static int moved(uint64_t call, uint64_t i) {
  uint64_t z = call * 0x9E3779B97F4A7C15ull + i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (int)((z ^ (z >> 31)) & 1u);
}

static void jitter(af_tensor* t) {
  int64_t b, h, s, d;
  uint64_t i = 0;
  for (b = 0; b < t->shape[0]; ++b)
    for (h = 0; h < t->shape[1]; ++h)
      for (s = 0; s < t->shape[2]; ++s)
        for (d = 0; d < t->shape[3]; ++d, ++i) {
          float* x = at(t, b, h, s, d);
          if (*x != 0.0f && isfinite(*x) && moved(backward_calls, i)) *x = nextafterf(*x, INFINITY);
        }
}

static int atomic_backward(const af_problem* p, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o,
                           const af_tensor* lse, const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk,
                           af_tensor* dv, char* msg, size_t len) {
  int rc = minimal_plugin_get()->backward(p, q, k, v, o, lse, d_o, d_lse, dq, dk, dv, msg, len);
  ++backward_calls;
  if (rc == 0) {
    jitter(dk);
    jitter(dv);
  }
  return rc;
}

static af_plugin atomic_table;

uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
const af_plugin* attnfuzz_plugin_get(void) {
  atomic_table = *minimal_plugin_get();
  atomic_table.name = ATTNFUZZ_DECLARE_NONDETERMINISM ? "atomic_declared" : "atomic_undeclared";
  if (ATTNFUZZ_DECLARE_NONDETERMINISM) atomic_table.flags |= AF_NONDETERMINISTIC_DK | AF_NONDETERMINISTIC_DV;
  atomic_table.backward = atomic_backward;
  return &atomic_table;
}
