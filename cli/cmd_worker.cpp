// The hidden `attnfuzz worker`: serves the worker protocol (campaign/worker_protocol.h) for a
// campaign, `replay` or the isolated minimizer, with this build's backends and CPU oracles.
#include <fmt/core.h>

#include <memory>
#include <optional>

#include "campaign/worker_protocol.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "harness/errors.h"
#include "backends/provenance.h"
#include "backends/registry.h"

namespace attnfuzz::cli {
namespace {

int worker_command(const std::vector<std::string>& names, uint64_t memory_budget_mib) {
  // The protocol runs over the descriptors WorkerProcess set up; stdout is already stderr.
  set_backend_threads(1);
  std::optional<WorkerChannel> channel;
  try {
    channel.emplace(WorkerChannel::from_environment());
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnfuzz: worker: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  WorkerServices services;
  services.make_backend = [](const std::string& name) { return make_backend(name); };
  // Per case: the GPU set for GPU backends at sizes where it pays (backends/registry.h, choose_oracle_device).
  services.oracles = [](const std::vector<Backend*>& backends, const Case& c) { return oracles_for(backends, c); };
  services.host_work = [](const std::vector<Backend*>& backends, const Case& c) {
    return host_work(backends, choose_oracle_device(backends, c, oracle_device_override()));
  };
  services.memory_budget_bytes = memory_budget_mib << 20;
  services.environment = environment;
  services.gpu_health = gpu_health;
  serve_worker(*channel, names, services);
  return kExitOk;
}

}  // namespace

void add_worker_command(CLI::App& app, int& exit_code) {
  auto names = std::make_shared<std::vector<std::string>>();
  auto budget_mib = std::make_shared<uint64_t>(Limits{}.memory_budget_bytes >> 20);
  CLI::App* worker = app.add_subcommand("worker", "")->group("");  // hidden: spawned by campaign/replay/minimize
  add_shared_option(worker, Flag::backends, *names);
  worker->add_option("--memory-budget-mib", *budget_mib)->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));  // run --isolate's
  worker->callback([names, budget_mib, &exit_code] { exit_code = worker_command(*names, *budget_mib); });
}

}  // namespace attnfuzz::cli
