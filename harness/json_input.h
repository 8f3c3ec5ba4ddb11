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

}  // namespace attnfuzz
