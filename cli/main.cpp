// attnfuzz: differential testing of fused attention kernels. See README.md.
#include <fmt/core.h>

#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"attnfuzz: fuzzing and differential testing of fused attention kernels"};
  app.require_subcommand(1);
  int exit_code = attnfuzz::cli::kExitOk;
  attnfuzz::cli::add_run_command(app, exit_code);
  attnfuzz::cli::add_list_command(app, exit_code);
  attnfuzz::cli::add_generate_command(app, exit_code);
  attnfuzz::cli::add_minimize_command(app, exit_code);
  attnfuzz::cli::add_import_command(app, exit_code);
  attnfuzz::cli::add_campaign_command(app, exit_code);
  attnfuzz::cli::add_check_command(app, exit_code);
  attnfuzz::cli::add_replay_command(app, exit_code);
  attnfuzz::cli::add_merge_command(app, exit_code);
  attnfuzz::cli::add_worker_command(app, exit_code);
  attnfuzz::cli::add_report_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : attnfuzz::cli::kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnfuzz: internal error: {}\n", e.what());
    return attnfuzz::cli::kExitInternal;
  }
  return exit_code;
}
