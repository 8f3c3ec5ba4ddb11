#pragma once
// Strict checks of command-line values, shared by every subcommand: a value that is not what
// the flag takes is refused by name (exit 2, one line), never wrapped, saturated or defaulted
// ("-1" as an unsigned count, "nan" seconds, "1/2/3" as a shard, "" as a directory).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnfuzz::cli {

// Text quoted in a message (harness/errors.h, message_safe): control characters and invalid
// UTF-8 escaped as \xNN, cut to about 200 characters.
std::string printable(const std::string& text);

// Decimal digits only, fitting in 64 bits (no sign, no exponent, no spaces).
CLI::Validator strict_unsigned();
// A finite number of seconds in [min, max]. Below a second a budget ends before a worker has
// started (`--seconds 0.001`: 0 cases, exit 0) and a watchdog fires on correct backends
// (`--timeout 1e-9`: a timeout finding; `replay --timeout 1e-300`: every replay an ERROR).
CLI::Validator seconds_in(double min, double max);
inline constexpr double kMinBudgetSeconds = 1, kMaxBudgetSeconds = 1e9;    // campaign --seconds
inline constexpr double kMinTimeoutSeconds = 1, kMaxTimeoutSeconds = 1e6;  // --timeout of campaign, check, replay
// A non-empty path (an explicit `--out ''` is an error, not the default).
CLI::Validator non_empty_path();

// "i/N" with 0 <= i < N <= 2^20; throws std::invalid_argument naming --shard.
void parse_shard(const std::string& text, int& shard, int& shards);
// "0,1,2": each id non-empty, without spaces or control characters; throws naming --devices.
std::vector<std::string> parse_devices(const std::string& text);
// Throws std::invalid_argument naming --backends when one is given twice.
void refuse_repeated_backends(const std::vector<std::string>& backends);
// A directory the command will write into (created if missing): an error line naming `flag`,
// or nothing when it can be written.
std::optional<std::string> writable_directory(const std::string& flag, const std::string& dir);
// A file the command will write (campaign/output_file.h, unwritable_output): its directory must
// exist and be writable, and the name must be new or a regular file (not a directory, device
// node, FIFO, socket or symbolic link). An error line naming `flag`, or nothing.
std::optional<std::string> writable_file(const std::string& flag, const std::string& path);

}  // namespace attnfuzz::cli
