#pragma once
// The shared options of the subcommands, one table (cli/flags.def): a command names the flag and
// the variable it fills, and says only what its use adds to the table's meaning.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/arg_checks.h"

namespace attnfuzz::cli {

enum class Flag {
#define ATTNFUZZ_FLAG(id, spelling, meaning, check, delimiter) id,
#include "cli/flags.def"
#undef ATTNFUZZ_FLAG
};

struct FlagRow {
  const char* spelling;
  const char* meaning;
  CLI::Validator check;
  char delimiter;  // 0: one value
};
const FlagRow& flag_row(Flag flag);

// The help of `flag` in one command: the table's meaning, then the command's `use`.
std::string flag_help(Flag flag, const std::string& use);

// Adds `flag` to `cmd`, filling `value`: its spelling, help, check and delimiter from the table.
// A command narrows the check with ->check(...) on the result where it takes less.
template <class T>
CLI::Option* add_shared_option(CLI::App* cmd, Flag flag, T& value, const std::string& use = "") {
  const FlagRow& row = flag_row(flag);
  CLI::Option* option = cmd->add_option(row.spelling, value, flag_help(flag, use))->check(row.check);
  if (row.delimiter != 0) option->delimiter(row.delimiter);
  return option;
}

// --oracle-device and --plugin-path, which set process-wide choices (backends/registry.h,
// harness/plugin_path.h) rather than a command's variable.
CLI::Option* add_oracle_device_option(CLI::App* cmd, const std::string& alias = "");
CLI::Option* add_plugin_path_option(CLI::App* cmd, const std::string& use = "");

}  // namespace attnfuzz::cli
