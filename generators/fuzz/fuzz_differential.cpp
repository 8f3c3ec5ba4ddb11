// libFuzzer target: bytes -> Case (generators/fuzz_decode.h) -> the differential check over
// the backends in ATTNFUZZ_FUZZ_BACKENDS (comma-separated, e.g. plugin:/path/lib.so).
// Feedback beyond code coverage: for each (backend, tensor), the bucket of
// log2(error / bound) sets one of libFuzzer's extra counters, so an input whose error
// comes closer to the bound than any before is kept, and the fuzzer climbs toward a
// divergence. On a finding it writes a reproducer into ATTNFUZZ_FUZZ_OUT (default
// fuzz-findings/) and aborts, so libFuzzer saves the input and stops
// (ATTNFUZZ_FUZZ_KEEP_GOING=1 records and continues). ATTNFUZZ_FUZZ_NO_COUNTERS=1
// turns the error-guided counters off (to measure what they add).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "campaign/output_file.h"
#include "campaign/repro.h"
#include "generators/fuzz_decode.h"
#include "harness/differential.h"
#include "backends/provenance.h"
#include "backends/registry.h"

namespace {

constexpr int kMaxBackends = 8, kTensors = 5, kBuckets = 32;
__attribute__((used, section("__libfuzzer_extra_counters"))) uint8_t g_error_counters[kMaxBackends * kTensors * kBuckets];

struct State {
  attnfuzz::BackendSet loaded;
  std::vector<attnfuzz::Backend*> backends;
  std::vector<std::string> names;
  attnfuzz::OracleSet oracles = attnfuzz::default_oracles();
  std::string out_dir = "fuzz-findings";
  bool counters = true, keep_going = false;
};

State& state() {
  static State* s = [] {
    auto* st = new State;
    const char* list = std::getenv("ATTNFUZZ_FUZZ_BACKENDS");
    if (!list || !*list) {
      std::fprintf(stderr, "fuzz_differential: set ATTNFUZZ_FUZZ_BACKENDS (e.g. plugin:/path/libattnfuzz_mutant_ok.so)\n");
      std::exit(2);
    }
    std::stringstream ss(list);
    for (std::string name; std::getline(ss, name, ',');) st->names.push_back(name);
    try {
      st->loaded = attnfuzz::make_backends(st->names);
    } catch (const attnfuzz::BackendLoadError& e) {
      std::fprintf(stderr, "fuzz_differential: ATTNFUZZ_FUZZ_BACKENDS: %s\n", e.what());
      std::exit(2);
    }
    st->backends = st->loaded.pointers();
    if (st->backends.size() > kMaxBackends) std::exit(2);
    if (const char* o = std::getenv("ATTNFUZZ_FUZZ_OUT")) st->out_dir = o;
    st->counters = !std::getenv("ATTNFUZZ_FUZZ_NO_COUNTERS");
    st->keep_going = std::getenv("ATTNFUZZ_FUZZ_KEEP_GOING") != nullptr;
    return st;
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  State& st = state();
  const attnfuzz::Case c = attnfuzz::decode_case(data, size);
  attnfuzz::DiffOptions opt;
  opt.check_determinism = false;
  const attnfuzz::DiffReport r = attnfuzz::run_differential(c, st.backends, st.oracles, opt);
  if (st.counters) {
    int b = -1;
    std::string last;
    for (const auto& run : r.runs) {
      if (run.backend != last) ++b, last = run.backend;
      if (run.skipped || b >= kMaxBackends) continue;
      for (size_t t = 0; t < run.tensors.size() && t < kTensors; ++t) {
        const auto& v = run.tensors[t];
        if (!v.compared || v.bound_rms <= 0) continue;
        const double ratio = v.err.rms / v.bound_rms;
        int bucket = ratio > 0 ? static_cast<int>(std::floor(std::log2(ratio))) + 24 : 0;
        bucket = std::max(0, std::min(kBuckets - 1, bucket));
        g_error_counters[(b * kTensors + static_cast<int>(t)) * kBuckets + bucket] = 1;
      }
    }
  }
  if (!r.findings.empty()) {
    std::filesystem::create_directories(st.out_dir);
    for (const auto& f : r.findings) {
      const attnfuzz::Reproducer rep = attnfuzz::reproducer_of(c, st.names, f, r, attnfuzz::environment());
      attnfuzz::write_file_atomic(st.out_dir + "/" + attnfuzz::repro_file_name(f.signature), attnfuzz::write_repro(rep));
    }
    std::fprintf(stderr, "fuzz_differential: %zu finding(s), first %s\n", r.findings.size(), r.findings[0].signature.to_string().c_str());
    if (!st.keep_going) std::abort();
  }
  return 0;
}
