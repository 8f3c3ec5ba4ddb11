// attnfuzz: differential testing of fused attention kernels. See README.md.
#include <fmt/core.h>

#include <exception>

#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/visible_gpus.h"
#include "harness/errors.h"

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
  attnfuzz::cli::add_gpus_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help: the usage, exit 0
    // One line naming the subcommand and the argument: CLI11's own message, with the hint on it.
    std::string where = "attnfuzz";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    if (argc > 1 && argv[1][0] != '-' && app.get_subcommands().empty()) {
      fmt::print(stderr, "attnfuzz: unknown subcommand '{}' (attnfuzz --help lists them)\n", attnfuzz::cli::printable(argv[1]));
      return attnfuzz::cli::kExitBadInput;
    }
    std::string what = e.what();
    for (char& ch : what)
      if (ch == '\n') ch = ' ';
    fmt::print(stderr, "{}: {} (see {} --help)\n", where, attnfuzz::cli::printable(what), where);
    return attnfuzz::cli::kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnfuzz: internal error: {}\n", attnfuzz::message_safe(e.what(), 600));
    return attnfuzz::cli::kExitInternal;
  }
  return exit_code;
}
