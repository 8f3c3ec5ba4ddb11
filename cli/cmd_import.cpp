// `attnfuzz import ARTIFACT`: turns a libFuzzer artifact of fuzz_differential (raw bytes)
// into a normal reproducer, decoding it exactly as the target did and re-running it.
#include <fmt/core.h>

#include <memory>

#include "campaign/output_file.h"
#include "campaign/repro.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "generators/fuzz_decode.h"
#include "harness/case_json.h"
#include "harness/differential.h"
#include "harness/json_input.h"
#include "backends/provenance.h"
#include "backends/registry.h"

namespace attnfuzz::cli {

void add_import_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string artifact, out;
    std::string tier = domain::tier_name(domain::kFuzzTier);
    std::vector<std::string> backends;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("import", "Turn a fuzz_differential artifact into a reproducer JSON");
  cmd->add_option("artifact", opt->artifact, "libFuzzer input (crash-*, or any corpus file)")->required();
  add_shared_option(cmd, Flag::backends, opt->backends, "that the fuzzer ran (ATTNFUZZ_FUZZ_BACKENDS)")->required();
  add_shared_option(cmd, Flag::out, opt->out, "output file (default: ARTIFACT.json)");
  add_shared_option(cmd, Flag::tier, opt->tier, "that the fuzzer decoded at (ATTNFUZZ_FUZZ_TIER): toy, small (default), real or decode")
      ->check(CLI::IsMember({"toy", "small", "real", "decode"}));
  cmd->callback([opt, &exit_code] {
    auto refuse = [&exit_code](const std::string& line) {
      fmt::print(stderr, "attnfuzz: {}\n", line);
      exit_code = kExitBadInput;
    };
    // A regular file of at most 16 MiB, checked before reading (not a directory, not /dev/zero).
    // An empty file is a valid fuzzer input (libFuzzer runs it first): it decodes to a case.
    std::string bytes;
    try {
      bytes = read_input_file(opt->artifact);
    } catch (const std::exception& e) {
      return refuse("import: " + opt->artifact + ": " + e.what());
    }
    const std::string dest = opt->out.empty() ? opt->artifact + ".json" : opt->out;
    if (const auto why = writable_file(opt->out.empty() ? "import (ARTIFACT.json)" : "--out", dest)) return refuse(*why);
    const Case c = decode_case(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), *domain::tier_from_name(opt->tier));
    BackendSet loaded;
    try {
      refuse_repeated_backends(opt->backends);
      loaded = make_backends(opt->backends);
    } catch (const std::exception& e) {
      return refuse(std::string(dynamic_cast<const BackendLoadError*>(&e) ? "--backends: " : "") + e.what());
    }
    const std::vector<Backend*> backends = loaded.pointers();
    const DiffReport r = run_differential(c, backends, oracles_for(backends, c));
    try {
      if (r.findings.empty()) {
        write_file_atomic(dest, write_case(c));
        fmt::print("no finding on re-run; wrote the case to {}\n", dest);
        exit_code = kExitOk;
        return;
      }
      Reproducer found = reproducer_of(c, opt->backends, r.findings[0], r, environment(), backend_sources(backends));
      found.minimized_from = opt->artifact;
      write_file_atomic(dest, write_repro(found));
    } catch (const std::exception& e) {  // a full disk
      return refuse("import: " + dest + ": " + e.what());
    }
    fmt::print("{} finding(s); wrote a reproducer of {} to {}\n", r.findings.size(), r.findings[0].signature.to_string(), dest);
    exit_code = kExitDivergence;
  });
}

}  // namespace attnfuzz::cli
