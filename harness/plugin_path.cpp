#include "harness/plugin_path.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "harness/errors.h"

namespace attnfuzz {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_dirs(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(':', start);
    const std::string d = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!d.empty()) out.push_back(d);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// The folder of the running executable (/proc/self/exe), or nothing where it cannot be read.
std::optional<fs::path> executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  return exe.parent_path();
}

std::string file_name_of(const std::string& spec) { return fs::path(spec).filename().string(); }

}  // namespace

void add_plugin_path(const std::string& dirs) {
  if (dirs.find('\0') != std::string::npos) throw std::invalid_argument("--plugin-path: contains a NUL byte");
  const char* old = std::getenv(kPluginPathEnv);
  const std::string joined = old && *old ? dirs + ":" + old : dirs;
  ::setenv(kPluginPathEnv, joined.c_str(), 1);
}

std::vector<std::string> plugin_search_path(const std::vector<std::string>& hints) {
  std::vector<std::string> out;
  if (const char* env = std::getenv(kPluginPathEnv)) out = split_dirs(env);
  for (const std::string& h : hints)
    if (!h.empty()) out.push_back(h);
  if (const auto dir = executable_dir())
    for (const fs::path& base : {*dir, dir->parent_path()})
      for (const char* sub : {"plugins", "mutants"}) out.push_back((base / sub).string());
  return out;
}

std::string resolve_plugin(const std::string& spec, const std::vector<std::string>& hints) {
  std::error_code ec;
  if (spec.find('/') != std::string::npos && fs::is_regular_file(spec, ec)) return spec;
  const std::string name = file_name_of(spec);
  if (name.empty() || name == "." || name == "..") throw std::runtime_error("plugin '" + message_safe(spec, 200) + "': no file name");
  const std::vector<std::string> dirs = plugin_search_path(hints);
  for (const std::string& d : dirs) {
    const fs::path candidate = fs::path(d) / name;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  std::string searched;
  for (const std::string& d : dirs) searched += (searched.empty() ? "" : ", ") + d;
  throw std::runtime_error("plugin " + message_safe(spec, 200) + ": cannot load: not found" +
                           (spec.find('/') != std::string::npos ? " at that path, and " + name + " is" : "") +
                           " not in the plugin path (--plugin-path, " + kPluginPathEnv + ", the build's plugin folders: " +
                           message_safe(searched, 600) + ")");
}

std::string plugin_content_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("plugin " + message_safe(path, 200) + ": cannot read it to hash it");
  uint64_t h = 1469598103934665603ull;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("fnv1a64:") + hex;
}

std::map<std::string, std::string> plugin_source(const std::string& path) {
  return {{"file", file_name_of(path)}, {"content_hash", plugin_content_hash(path)}, {"recorded_path", path}};
}

std::optional<std::string> plugin_spec(const std::string& backend_name) {
  if (backend_name.rfind("plugin:", 0) != 0) return std::nullopt;
  return backend_name.substr(7);
}

std::string portable_backend_name(const std::string& name) {
  const auto spec = plugin_spec(name);
  return spec ? "plugin:" + file_name_of(*spec) : name;
}

}  // namespace attnfuzz
