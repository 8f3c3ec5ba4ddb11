#pragma once
// Reproducers ("format": "attnfuzz-repro/1"): a Case, the backends it ran through, the
// finding (signature, detail, metrics, tolerance rule), the inputs' checksum and the
// environment. Written atomically (campaign/output_file.h), so a crash never leaves a torn
// file. `attnfuzz run`, `minimize` and the fuzz targets read and write them.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/case.h"
#include "harness/differential.h"
#include "harness/verdict.h"

namespace attnfuzz {

inline constexpr const char* kReproFormat = "attnfuzz-repro/1";

struct Reproducer {
  Case c;
  std::vector<std::string> backends;
  Finding finding;
  std::string rule;
  uint64_t input_checksum = 0;
  std::string minimized_from;  // the file it was shrunk from, if any
  int64_t case_index = -1;     // position in a campaign's case stream, if it came from one
  // Where it was found: GPU, driver, CUDA, cuDNN, LibTorch, harness commit (oracles/registry.h).
  std::map<std::string, std::string> environment;
  // Set when read from a file written before "record_checksum" existed: only its inputs
  // (input_checksum) can be verified, not its case, backends or finding.
  bool legacy_checksum = false;
};

// Every file written carries "record_checksum": FNV-1a over the canonical JSON of what decides
// a replay (format, case, backends, the finding's signature, input_checksum), so an edited
// reproducer (another seed, another mask, a deleted finding) is refused instead of judged.
// input_checksum keeps its old meaning (the regenerated inputs' values), so reproducers written
// before record_checksum existed still load (legacy_checksum = true).
std::string write_repro(const Reproducer& r);
nlohmann::json repro_to_json(const Reproducer& r);
// Throws CaseError: malformed JSON, another format, a missing case, finding or
// input_checksum, or a record_checksum that does not match.
Reproducer parse_repro(const std::string& text);
Reproducer repro_from_json(const nlohmann::json& j);
// The one way to build the reproducer of a finding of a differential run: its case, the
// backends named for the run, the rule and input checksum of the run, and where it ran.
Reproducer reproducer_of(const Case& c, const std::vector<std::string>& backends, const Finding& f, const DiffReport& run,
                         std::map<std::string, std::string> environment);
Reproducer load_repro(const std::string& path);  // a regular file within kMaxInputFileBytes (json_input.h)
// A file name from a signature: a short readable stem and a hash, stable across runs.
std::string repro_file_name(const Signature& s);
// Campaign deduplication buckets: backend/composition/tensor/class (dtype and mask left out),
// and the file name of a bucket's representative.
std::string bucket_of(const Signature& s);
std::string bucket_file_name(const Signature& s);

}  // namespace attnfuzz
