// `attnfuzz report RUN_DIR`: the HTML report of a campaign (or merged) directory. Each
// numeric finding is re-run once for its error pictures, in a forked child with a watchdog
// (--timeout): a backend that crashes or hangs costs that finding's pictures, not the report.
#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "campaign/report.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "harness/compose.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "oracles/reference.h"
#include "backends/registry.h"

namespace attnfuzz::cli {

ReportServices report_services() {
  ReportServices s;
  s.load_blamed = [](const Reproducer& r) -> std::unique_ptr<Backend> {
    BackendSet loaded = make_backends(r.backends, WhenUnavailable::skip);
    for (auto& b : loaded.owned)
      if (b->name() == r.finding.signature.backend) return std::move(b);
    throw BackendLoadError("none of its backends is '" + r.finding.signature.backend + "' here");
  };
  s.reference = [] { return std::unique_ptr<Backend>(std::make_unique<ReferenceBackend>()); };
  return s;
}

void add_report_command(CLI::App& app, int& exit_code) {
  auto dir = std::make_shared<std::string>();
  auto timeout = std::make_shared<double>(300);
  CLI::App* cmd = app.add_subcommand("report", "Write RUN_DIR/report.html: summary, findings, pictures");
  cmd->add_option("run_dir", *dir, "campaign or merged output directory")->required()->check(CLI::ExistingDirectory);
  add_shared_option(cmd, Flag::timeout, *timeout, "seconds each finding's re-run (for its pictures) may take, in its own process (default 300)");
  cmd->callback([dir, timeout, &exit_code] {
    try {
      std::vector<std::string> left_out;
      ReportServices services = report_services();
      services.rerun_timeout_s = *timeout;
      fmt::print("wrote {}\n", write_report(*dir, services, &left_out));
      std::fflush(stdout);
      for (const auto& why : left_out) fmt::print(stderr, "attnfuzz: report: warning: {}\n", why);
      exit_code = kExitOk;
    } catch (const std::exception& e) {  // not a campaign directory, a damaged summary, an unwritable directory
      fmt::print(stderr, "attnfuzz: report: {}\n", message_safe(e.what(), 600));
      exit_code = kExitBadInput;
    }
  });
}

}  // namespace attnfuzz::cli
