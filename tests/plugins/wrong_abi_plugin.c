/* A plugin built for an ABI the harness does not speak: the loader must refuse it by its
 * version alone, before it reads the table (whose layout could differ in another version). */
#include <stdio.h>

#include "attnfuzz_plugin.h"

static int refuse(char* msg, size_t len) {
  snprintf(msg, len, "wrong_abi plugin: must never be called");
  return 1;
}
static int supports(const af_problem* p, char* msg, size_t len) {
  (void)p;
  return refuse(msg, len);
}

static const af_plugin plugin = {999u, "wrong_abi", "0", 0u, "{}", supports, NULL, NULL};

uint32_t attnfuzz_plugin_abi_version(void) { return 999u; }
const af_plugin* attnfuzz_plugin_get(void) { return &plugin; }
