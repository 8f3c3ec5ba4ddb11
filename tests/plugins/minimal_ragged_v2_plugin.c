/* The documented minimal plugin built for ABI version 2, declaring "ragged": true: a plugin of
 * an older version that takes ragged batches the way it always did, padded, through the dense
 * mask (tests/test_mutant_zoo.cpp, VarlenPlugin). */
#define ATTNFUZZ_PLUGIN_ABI_VERSION 2u
#include "minimal_plugin.c"

const char* attnfuzz_plugin_envelope(void);
const char* attnfuzz_plugin_envelope(void) { return "{\"ragged\": true}"; }
