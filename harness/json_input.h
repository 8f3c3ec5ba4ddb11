#pragma once
// Reading untrusted JSON input (cases, reproducers, campaign files): only regular files, at
// most kMaxInputFileBytes, checked before anything is read; parsed strictly (a key given
// twice in one object is an error, not "the last one wins"). Errors are CaseErrors, one line.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace attnfuzz {

// Cases and reproducers are a few KB; the largest legitimate ones (block-sparse tile maps of
// long sequences) stay far below this.
inline constexpr uint64_t kMaxInputFileBytes = uint64_t{16} << 20;

// The bytes of `path`. Throws CaseError("<file>", ...) when it cannot be opened, is not a
// regular file (a directory, a FIFO, a device such as /dev/zero) or is larger than max_bytes.
// A FIFO is never waited on: the file is opened non-blocking and checked before reading.
std::string read_input_file(const std::string& path, uint64_t max_bytes = kMaxInputFileBytes);

// Parses JSON text; throws CaseError("<json>", ...) when it is malformed or an object holds a
// key twice.
nlohmann::json parse_strict_json(const std::string& text);

// A count in a file attnfuzz wrote and reads back (state.json, summary.json): the whole number in
// [0, 2^64 - 1] at `key` of the object `j`, or `absent` when it has none. Anything else (a
// negative number, which would read as 2^64 - 5, a fraction, a string) throws
// std::invalid_argument naming `where`.`key`.
uint64_t count_at(const nlohmann::json& j, const std::string& key, const std::string& where, uint64_t absent = 0);
// a + b, or std::overflow_error naming `what` when the sum is past 2^64 - 1 (never wrapped).
uint64_t checked_sum(uint64_t a, uint64_t b, const std::string& what);

}  // namespace attnfuzz
