#pragma once
// Subcommands of the attnfuzz CLI. Each registers itself on the app and runs
// through the callback it installs; the result lands in `exit_code`.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "campaign/report.h"
#include "campaign/repro.h"

namespace attnfuzz::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitDivergence = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 3;
// Nothing was tested: `check` with a backend that ran no case, `run` with every backend skipped.
// Takes precedence over kExitDivergence: findings elsewhere do not make the check what it claims.
inline constexpr int kExitUntested = 4;

void add_run_command(CLI::App& app, int& exit_code);
// How to start this binary as an isolated worker running these backends (harness/worker.h).
std::vector<std::string> worker_argv(const std::vector<std::string>& backends);
// How the report re-runs a finding for its pictures: this build's backends and reference.
ReportServices report_services();
void add_list_command(CLI::App& app, int& exit_code);
void add_generate_command(CLI::App& app, int& exit_code);
void add_minimize_command(CLI::App& app, int& exit_code);
void add_import_command(CLI::App& app, int& exit_code);
void add_campaign_command(CLI::App& app, int& exit_code);
void add_check_command(CLI::App& app, int& exit_code);
void add_replay_command(CLI::App& app, int& exit_code);
void add_merge_command(CLI::App& app, int& exit_code);
void add_worker_command(CLI::App& app, int& exit_code);
void add_report_command(CLI::App& app, int& exit_code);

}  // namespace attnfuzz::cli
