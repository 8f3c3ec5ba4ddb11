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

#include "harness/backend.h"
#include "harness/case.h"
#include "harness/differential.h"
#include "harness/verdict.h"

namespace attnfuzz {

inline constexpr const char* kReproFormat = "attnfuzz-repro/1";

using BackendSources = std::map<std::string, std::map<std::string, std::string>>;

struct Reproducer {
  Case c;
  std::vector<std::string> backends;
  Finding finding;
  std::string rule;
  uint64_t input_checksum = 0;
  std::string minimized_from;  // the file it was shrunk from, if any
  int64_t case_index = -1;     // position in a campaign's case stream, if it came from one
  // Where it was found: GPU, driver, CUDA, cuDNN, LibTorch, harness commit (backends/registry.h).
  std::map<std::string, std::string> environment;
  // Where the code of each of the user's backends came from (Backend::provenance), by its name
  // in `backends`: a plugin's file name and content hash, an adapter's module, class and library
  // versions. Not covered by record_checksum: it says what ran, not what to replay.
  BackendSources backend_sources;
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
// backends named for the run (a plugin by its file name, harness/plugin_path.h), the rule and
// input checksum of the run, where it ran, and where the user's backends came from.
Reproducer reproducer_of(const Case& c, const std::vector<std::string>& backends, const Finding& f, const DiffReport& run,
                         std::map<std::string, std::string> environment, BackendSources sources = {});
// The provenance of the user's backends among `backends`, keyed by their portable names.
BackendSources backend_sources(const std::vector<Backend*>& backends);
// The names as a reproducer records them (harness/plugin_path.h, portable_backend_name).
std::vector<std::string> portable_backend_names(const std::vector<std::string>& names);
// The sources of the plugins among `names` from their files alone (no backend loaded): for a
// finding whose worker died before it could say what it ran.
BackendSources plugin_file_sources(const std::vector<std::string>& names);
// The names to run a reproducer's backends by on this machine (`names`: its own, or the
// --backends that override them): each plugin found as harness/plugin_path.h says (the folder
// it was recorded in as a hint) and given by the path found. A plugin whose library is not the
// one recorded (another content hash) is refused, unless `any_build`: then *notes says so.
// Throws std::runtime_error naming the plugin, the two hashes and what to pass.
std::vector<std::string> runnable_backends(const Reproducer& r, const std::vector<std::string>& names, bool any_build,
                                           std::vector<std::string>* notes);
Reproducer load_repro(const std::string& path);  // a regular file within kMaxInputFileBytes (json_input.h)
// A file name from a signature: a short readable stem and a hash, stable across runs.
std::string repro_file_name(const Signature& s);
// Campaign deduplication buckets: backend/composition/tensor/class (dtype and mask left out),
// and the file name of a bucket's representative.
std::string bucket_of(const Signature& s);
std::string bucket_file_name(const Signature& s);

}  // namespace attnfuzz
