// `attnfuzz import ARTIFACT`: turns a libFuzzer artifact of fuzz_differential (raw bytes)
// into a normal reproducer, decoding it exactly as the target did and re-running it.
#include <fmt/core.h>

#include <fstream>
#include <iterator>
#include <memory>

#include "campaign/repro.h"
#include "cli/commands.h"
#include "generators/fuzz_decode.h"
#include "harness/case_json.h"
#include "harness/differential.h"
#include "oracles/provenance.h"
#include "oracles/registry.h"

namespace attnfuzz::cli {

void add_import_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string artifact, out;
    std::vector<std::string> backends;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("import", "Turn a fuzz_differential artifact into a reproducer JSON");
  cmd->add_option("artifact", opt->artifact, "libFuzzer input (crash-*, or any corpus file)")->required();
  cmd->add_option("--backends", opt->backends, "backends the fuzzer ran (ATTNFUZZ_FUZZ_BACKENDS)")->delimiter(',')->required();
  cmd->add_option("--out", opt->out, "output file (default: ARTIFACT.json)");
  cmd->callback([opt, &exit_code] {
    std::ifstream in(opt->artifact, std::ios::binary);
    if (!in) {
      fmt::print(stderr, "attnfuzz: cannot open '{}'\n", opt->artifact);
      exit_code = kExitBadInput;
      return;
    }
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const Case c = decode_case(bytes.data(), bytes.size());
    BackendSet loaded;
    try {
      loaded = make_backends(opt->backends);
    } catch (const BackendLoadError& e) {
      fmt::print(stderr, "attnfuzz: --backends: {}\n", e.what());
      exit_code = kExitBadInput;
      return;
    }
    const std::vector<Backend*> backends = loaded.pointers();
    const DiffReport r = run_differential(c, backends, default_oracles());
    const std::string dest = opt->out.empty() ? opt->artifact + ".json" : opt->out;
    if (r.findings.empty()) {
      write_file_atomic(dest, write_case(c));
      fmt::print("no finding on re-run; wrote the case to {}\n", dest);
      exit_code = kExitOk;
      return;
    }
    Reproducer found = reproducer_of(c, opt->backends, r.findings[0], r, environment());
    found.minimized_from = opt->artifact;
    write_file_atomic(dest, write_repro(found));
    fmt::print("{} finding(s); wrote a reproducer of {} to {}\n", r.findings.size(), r.findings[0].signature.to_string(), dest);
    exit_code = kExitDivergence;
  });
}

}  // namespace attnfuzz::cli
