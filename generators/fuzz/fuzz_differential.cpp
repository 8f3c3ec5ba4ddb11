// libFuzzer target: bytes -> Case (generators/fuzz_decode.h, at the tier ATTNFUZZ_FUZZ_TIER,
// default small) -> the differential check over the backends in ATTNFUZZ_FUZZ_BACKENDS
// (comma-separated, e.g. plugin:/path/lib.so,torch.flash), judged by the oracle set a run would
// choose (the GPU set for GPU backends at real sizes). Two builds: under the fuzz preset (clang,
// its own code instrumented, no LibTorch), and under the cpu and gpu presets (g++, LibTorch and the
// GPU backends, linked with libFuzzer's runtime and not instrumented: docs/fuzzing.md). Feedback
// beyond code coverage, in libFuzzer's extra counters:
//   - for each (backend, tensor), the bucket of log2(error / bound), so an input whose error comes
//     closer to the bound than any before is kept, and the fuzzer climbs toward a divergence;
//   - for each backend, the feature-map cell of each case it judged (campaign/feature_cells.h)
//     and each side feature's value, so an input that a backend is judged on in a new cell is
//     kept: what drives the uninstrumented build toward what its backends accept.
// On a finding it writes a reproducer into ATTNFUZZ_FUZZ_OUT (default fuzz-findings/) and aborts,
// so libFuzzer saves the input and stops (ATTNFUZZ_FUZZ_KEEP_GOING=1 records and continues).
// ATTNFUZZ_FUZZ_NO_COUNTERS=1 turns both kinds of extra counters off (to measure what they add).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "campaign/feature_cells.h"
#include "campaign/output_file.h"
#include "campaign/repro.h"
#include "generators/fuzz_decode.h"
#include "harness/differential.h"
#include "backends/provenance.h"
#include "backends/registry.h"

namespace {

constexpr int kMaxBackends = 8, kTensors = 6, kBuckets = 32, kFeatureCounters = 160;
__attribute__((used, section("__libfuzzer_extra_counters"))) uint8_t g_error_counters[kMaxBackends * kTensors * kBuckets];
// Per backend: one counter per feature-map cell, then one per value of each side feature.
__attribute__((used, section("__libfuzzer_extra_counters"))) uint8_t g_feature_counters[kMaxBackends * kFeatureCounters];

struct State {
  attnfuzz::BackendSet loaded;
  std::vector<attnfuzz::Backend*> backends;
  std::vector<std::string> names;
  attnfuzz::domain::SizeTier tier = attnfuzz::domain::kFuzzTier;
  std::map<std::string, int> cell_index;  // a feature-map cell's counter
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
    if (st->backends.size() > kMaxBackends) {
      std::fprintf(stderr, "fuzz_differential: ATTNFUZZ_FUZZ_BACKENDS: at most %d backends\n", kMaxBackends);
      std::exit(2);
    }
    if (const char* t = std::getenv("ATTNFUZZ_FUZZ_TIER")) {
      const auto tier = attnfuzz::domain::tier_from_name(t);
      if (!tier) {
        std::fprintf(stderr, "fuzz_differential: ATTNFUZZ_FUZZ_TIER takes toy, small, real or decode, got '%s'\n", t);
        std::exit(2);
      }
      st->tier = *tier;
    }
    size_t side_values = 0;
    for (const auto& f : attnfuzz::side_features()) side_values += f.values.size();
    const auto& cells = attnfuzz::all_cells();
    if (cells.size() + side_values > kFeatureCounters) {
      std::fprintf(stderr, "fuzz_differential: %zu feature cells and side values outgrew the %d feature counters\n",
                   cells.size() + side_values, kFeatureCounters);
      std::abort();
    }
    for (size_t i = 0; i < cells.size(); ++i) st->cell_index[cells[i]] = static_cast<int>(i);
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
  const attnfuzz::Case c = attnfuzz::decode_case(data, size, st.tier);
  attnfuzz::DiffOptions opt;
  opt.check_determinism = false;
  const attnfuzz::DiffReport r = attnfuzz::run_differential(c, st.backends, attnfuzz::oracles_for(st.backends, c), opt);
  if (st.counters) {
    // The case's feature counters, set for each backend that judged it.
    std::vector<int> features;
    if (const auto cell = st.cell_index.find(attnfuzz::cell_of(c)); cell != st.cell_index.end()) features.push_back(cell->second);
    int offset = static_cast<int>(st.cell_index.size());
    for (const auto& f : attnfuzz::side_features()) {
      const auto v = std::find_if(f.values.begin(), f.values.end(), [&](const char* name) { return std::string(name) == f.of(c); });
      if (v != f.values.end()) features.push_back(offset + static_cast<int>(v - f.values.begin()));
      offset += static_cast<int>(f.values.size());
    }
    int b = -1;
    std::string last;
    for (const auto& run : r.runs) {
      if (run.backend != last) ++b, last = run.backend;
      if (run.skipped || b >= kMaxBackends) continue;
      for (int f : features) g_feature_counters[b * kFeatureCounters + f] = 1;
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
