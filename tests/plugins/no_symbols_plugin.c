/* A shared library that loads but is not an attnfuzz plugin: it exports neither
 * attnfuzz_plugin_abi_version() nor attnfuzz_plugin_get(). The loader must refuse it. */
int not_an_attnfuzz_plugin(void);
int not_an_attnfuzz_plugin(void) { return 42; }
