#include "cli/flags.h"

#include <vector>

#include "backends/registry.h"
#include "harness/plugin_path.h"

namespace attnfuzz::cli {

const FlagRow& flag_row(Flag flag) {
  static const std::vector<FlagRow> rows{
#define ATTNFUZZ_FLAG(id, spelling, meaning, check, delimiter) {spelling, meaning, check, delimiter},
#include "cli/flags.def"
#undef ATTNFUZZ_FLAG
  };
  return rows.at(static_cast<size_t>(flag));
}

std::string flag_help(Flag flag, const std::string& use) {
  const std::string meaning = flag_row(flag).meaning;
  if (use.empty()) return meaning;
  if (meaning.empty()) return use;
  return meaning + " " + use;
}

CLI::Option* add_oracle_device_option(CLI::App* cmd, const std::string& alias) {
  const FlagRow& row = flag_row(Flag::oracle_device);
  const std::string names = alias.empty() ? row.spelling : std::string(row.spelling) + "," + alias;
  return cmd->add_option_function<std::string>(names, set_oracle_device_override, row.meaning)->check(row.check);
}

CLI::Option* add_plugin_path_option(CLI::App* cmd, const std::string& use) {
  const FlagRow& row = flag_row(Flag::plugin_path);
  return cmd->add_option_function<std::string>(row.spelling, add_plugin_path, flag_help(Flag::plugin_path, use))->check(row.check);
}

}  // namespace attnfuzz::cli
