#include "cli/visible_gpus.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>

#include "cli/commands.h"
#include "harness/errors.h"
#include "harness/isolated_call.h"
#include "harness/worker.h"

extern char** environ;

namespace attnfuzz::cli {
namespace {

constexpr const char* kVisibleEnv = "CUDA_VISIBLE_DEVICES";
// cuInit on a driver that is there but stuck must not hold the campaign up for long.
constexpr double kQuerySeconds = 60;

// The driver API's few calls the inventory needs (cuda.h: CUresult, CUdevice, CUuuid).
using CuResult = int;
struct CuUuid {
  unsigned char bytes[16];
};
using CuInit = CuResult (*)(unsigned);
using CuDeviceGetCount = CuResult (*)(int*);
using CuDeviceGet = CuResult (*)(int*, int);
using CuDeviceGetUuid = CuResult (*)(CuUuid*, int);
using CuGetErrorString = CuResult (*)(CuResult, const char**);

std::string uuid_text(const CuUuid& u) {
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += fmt::format("{:02x}", u.bytes[i]);
  }
  return s;
}

// What the driver shows this process: its lines for `attnfuzz gpus`.
std::vector<std::string> inventory_lines() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = ::dlerror();
    return {std::string("none: the CUDA driver (libcuda.so.1) cannot be loaded: ") + (e ? e : "?")};
  }
  auto sym = [lib](const char* name) { return ::dlsym(lib, name); };
  const auto init = reinterpret_cast<CuInit>(sym("cuInit"));
  const auto count = reinterpret_cast<CuDeviceGetCount>(sym("cuDeviceGetCount"));
  const auto get = reinterpret_cast<CuDeviceGet>(sym("cuDeviceGet"));
  auto uuid = reinterpret_cast<CuDeviceGetUuid>(sym("cuDeviceGetUuid_v2"));
  if (!uuid) uuid = reinterpret_cast<CuDeviceGetUuid>(sym("cuDeviceGetUuid"));
  const auto error_string = reinterpret_cast<CuGetErrorString>(sym("cuGetErrorString"));
  if (!init || !count || !get || !uuid) return {"none: the CUDA driver (libcuda.so.1) lacks cuInit, cuDeviceGetCount or cuDeviceGetUuid"};
  auto failed = [error_string](const char* call, CuResult r) {
    const char* text = nullptr;
    if (error_string) error_string(r, &text);
    return fmt::format("none: {} failed: {} ({})", call, text ? text : "unknown error", r);
  };
  if (const CuResult r = init(0); r != 0) return {failed("cuInit", r)};
  int n = 0;
  if (const CuResult r = count(&n); r != 0) return {failed("cuDeviceGetCount", r)};
  if (n == 0) return {"none: the CUDA driver shows no GPU"};
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) {
    int device = 0;
    CuUuid u{};
    if (const CuResult r = get(&device, i); r != 0) return {failed("cuDeviceGet", r)};
    if (const CuResult r = uuid(&u, device); r != 0) return {failed("cuDeviceGetUuid", r)};
    lines.push_back(uuid_text(u));
  }
  return lines;
}

// Runs `attnfuzz gpus` with CUDA_VISIBLE_DEVICES unset, or set to `visible`; its stdout, or why not.
std::string query_output(const std::optional<std::string>& visible, std::string* why) {
  std::vector<std::string> argv{self_executable(), "gpus"}, envs;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0) envs.emplace_back(*e);
  if (visible) envs.push_back(std::string(kVisibleEnv) + "=" + *visible);
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    *why = std::string("pipe failed: ") + std::strerror(errno);
    return {};
  }
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], devnull}) ::close(fd);
    *why = std::string("fork failed: ") + std::strerror(errno);
    return {};
  }
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::setpgid(0, 0);
    if (::dup2(out[1], 1) < 0) ::_exit(126);
    if (devnull >= 0) ::dup2(devnull, 0), ::dup2(devnull, 2);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  if (devnull >= 0) ::close(devnull);
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kQuerySeconds);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < (1u << 20)) text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(-pid, SIGKILL), ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (timed_out)
    *why = fmt::format("the device query (attnfuzz gpus) gave no answer within {:g} s", kQuerySeconds);
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    *why = "the device query (attnfuzz gpus) failed: " + describe_exit(status);
  return text;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

GpuInventory gpu_inventory(const std::optional<std::string>& visible) {
  GpuInventory inv;
  std::string why;
  const std::string text = query_output(visible, &why);
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    if (starts_with(line, "GPU-"))
      inv.uuids.push_back(line);
    else if (starts_with(line, "none: "))
      inv.why_none = line.substr(6);
    start = end + 1;
  }
  if (inv.uuids.empty() && inv.why_none.empty()) inv.why_none = why.empty() ? "the device query (attnfuzz gpus) said nothing" : why;
  return inv;
}

void check_device_ids(const std::vector<std::string>& ids) {
  std::set<std::string> given;
  for (const auto& id : ids)
    if (!given.insert(id).second)
      throw std::invalid_argument("--devices: '" + message_safe(id, 80) + "' is given twice (one worker per GPU)");
  const GpuInventory gpus = gpu_inventory();
  const size_t n = gpus.uuids.size();
  auto none_here = [&](const std::string& id) {
    return std::invalid_argument("--devices " + message_safe(id, 80) + ": no GPU here (" + message_safe(gpus.why_none, 300) + ")");
  };
  std::set<std::string> named;  // the GPU each id names
  for (const auto& id : ids) {
    const std::string shown = message_safe(id, 80);
    std::string gpu;
    if (all_digits(id)) {
      if (n == 0) throw none_here(id);
      if (id.size() > 9 || std::stoul(id) >= n)
        throw std::invalid_argument(fmt::format("--devices {}: no such GPU here: the CUDA driver shows {} ({})", shown, n,
                                                n == 1 ? "id 0" : fmt::format("ids 0 to {}", n - 1)));
      gpu = gpus.uuids[std::stoul(id)];
    } else if (starts_with(lower(id), "gpu-")) {
      if (n == 0) throw none_here(id);
      std::vector<std::string> match;
      for (const auto& u : gpus.uuids)
        if (starts_with(lower(u), lower(id).c_str())) match.push_back(u);
      if (match.empty())
        throw std::invalid_argument(fmt::format("--devices {}: no GPU here has that UUID (the CUDA driver shows {} GPU(s))", shown, n));
      if (match.size() > 1) throw std::invalid_argument("--devices " + shown + ": names more than one GPU here (give more of the UUID)");
      gpu = match[0];
    } else if (starts_with(lower(id), "mig-")) {
      const GpuInventory mig = gpu_inventory(id);
      if (mig.uuids.size() != 1)
        throw std::invalid_argument("--devices " + shown + ": no MIG instance here has that UUID (" +
                                    message_safe(mig.uuids.empty() ? mig.why_none : "it names more than one", 300) + ")");
      gpu = lower(id);
    } else {
      throw std::invalid_argument("--devices takes GPU ids as CUDA_VISIBLE_DEVICES does (0, 1, GPU-<uuid>, MIG-<uuid>), got '" + shown +
                                  "'");
    }
    if (!named.insert(gpu).second)
      throw std::invalid_argument("--devices " + shown + ": names a GPU another id names (one worker per GPU)");
  }
}

void add_gpus_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("gpus", "")->group("");  // hidden: campaign --devices asks it (visible_gpus.h)
  cmd->callback([&exit_code] {
    for (const auto& line : inventory_lines()) fmt::print("{}\n", line);
    exit_code = kExitOk;
  });
}

}  // namespace attnfuzz::cli
