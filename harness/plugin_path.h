#pragma once
// Where `plugin:NAME` finds its shared library, and how a reproducer names one so that it
// replays on another machine.
//
// A reproducer records a plugin by its file name (`plugin:libfoo.so`) and the content hash of
// the library it ran (Reproducer::backend_sources). A name is resolved:
//   1. a path that exists (absolute, or relative to the working directory) is that file;
//   2. otherwise its file name is looked up, first hit wins, in
//      a. the plugin path: --plugin-path DIRS, then ATTNFUZZ_PLUGIN_PATH (colon-separated);
//      b. `hints`: the folder the reproducer recorded it in;
//      c. the build's plugin folders: plugins/ and mutants/ beside the attnfuzz executable and
//         one level above it (build/<preset>/, and a staging folder's bin/../).
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attnfuzz {

inline constexpr const char* kPluginPathEnv = "ATTNFUZZ_PLUGIN_PATH";

// --plugin-path: colon-separated folders searched before ATTNFUZZ_PLUGIN_PATH. Kept in the
// environment (prepended to ATTNFUZZ_PLUGIN_PATH), so worker processes inherit it.
void add_plugin_path(const std::string& dirs);
// Folders searched for a bare file name, in order (2a, then `hints`, then 2c).
std::vector<std::string> plugin_search_path(const std::vector<std::string>& hints = {});
// The file `spec` names (rules above). Throws std::runtime_error naming the folders searched.
std::string resolve_plugin(const std::string& spec, const std::vector<std::string>& hints = {});
// "fnv1a64:<16 hex digits>" over the file's bytes. Throws std::runtime_error if unreadable.
std::string plugin_content_hash(const std::string& path);
// What a reproducer records of the plugin at `path` (Reproducer::backend_sources): "file" (its
// name), "content_hash" and "recorded_path". Throws std::runtime_error if unreadable.
std::map<std::string, std::string> plugin_source(const std::string& path);
// The name a reproducer records: "plugin:/any/dir/libfoo.so" becomes "plugin:libfoo.so";
// every other backend name is returned unchanged.
std::string portable_backend_name(const std::string& name);
// The path part of "plugin:PATH", or nothing for another name.
std::optional<std::string> plugin_spec(const std::string& backend_name);

}  // namespace attnfuzz
