// `attnfuzz report RUN_DIR`: the HTML report of a campaign (or merged) directory. Each
// numeric finding is re-run once, in this process, for its error pictures.
#include <fmt/core.h>

#include <cmath>
#include <memory>

#include "campaign/report.h"
#include "cli/commands.h"
#include "harness/compose.h"
#include "harness/inputs.h"
#include "oracles/reference.h"
#include "oracles/registry.h"

namespace attnfuzz::cli {

std::optional<ErrorProfile> finding_profile(const Reproducer& r) {
  const Signature& sig = r.finding.signature;
  if (sig.cls == FindingClass::crash || sig.cls == FindingClass::timeout || !sig.names_a_tensor()) return std::nullopt;
  // A picture is a courtesy: a finding whose backends cannot load here gets none, and the
  // report says so (campaign/report.cpp), like any other re-run that fails.
  try {
    const BackendSet loaded = make_backends(r.backends, WhenUnavailable::skip);
    Backend* be = nullptr;
    for (Backend* b : loaded.pointers())
      if (b->name() == sig.backend) be = b;
    if (!be) return std::nullopt;
    const Inputs in = generate_inputs(r.c);
    ReferenceBackend ref;
    const Composition comp = sig.composition == "single" ? Composition{} : r.c.composition;
    const ComposedResult want = run_composition(ref, r.c, in, Composition{});
    const ComposedResult got = run_composition(*be, r.c, in, comp);
    const std::optional<Output> output = output_from_string(sig.tensor);
    if (!output) return std::nullopt;
    const Tensor &a = got[*output], &b = want[*output];
    ErrorProfile p;
    p.tensor = sig.tensor;
    const int64_t S = a.shape[2], D = a.shape.size() > 3 ? a.shape[3] : 1;
    p.by_position.assign(static_cast<size_t>(S), 0.0);
    p.by_feature.assign(static_cast<size_t>(D), 0.0);
    for (size_t i = 0; i < a.numel(); ++i) {
      double e = std::fabs(a.data[i] - b.data[i]);
      if (std::isinf(a.data[i]) && a.data[i] == b.data[i]) e = 0;
      if (std::isnan(e) || std::isinf(e)) e = 1e300;
      p.abs_errors.push_back(e);
      const size_t s = static_cast<size_t>((static_cast<int64_t>(i) / D) % S), d = static_cast<size_t>(static_cast<int64_t>(i) % D);
      p.by_position[s] = std::max(p.by_position[s], e);
      p.by_feature[d] = std::max(p.by_feature[d], e);
    }
    auto bm = r.finding.metrics.find("bound_max");
    p.bound_max = bm != r.finding.metrics.end() ? bm->second : 0.0;
    return p;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void add_report_command(CLI::App& app, int& exit_code) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("report", "Write RUN_DIR/report.html: summary, findings, pictures");
  cmd->add_option("run_dir", *dir, "campaign or merged output directory")->required()->check(CLI::ExistingDirectory);
  cmd->callback([dir, &exit_code] {
    fmt::print("wrote {}\n", write_report(*dir, finding_profile));
    exit_code = kExitOk;
  });
}

}  // namespace attnfuzz::cli
