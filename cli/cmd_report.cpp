// `attnfuzz report RUN_DIR`: the HTML report of a campaign (or merged) directory. Each
// numeric finding is re-run once, in this process, for its error pictures.
#include <fmt/core.h>

#include <cmath>
#include <memory>

#include "cli/commands.h"
#include "harness/compose.h"
#include "harness/inputs.h"
#include "campaign/report.h"
#include "oracles/reference.h"
#include "oracles/registry.h"

namespace attnfuzz::cli {

std::optional<ErrorProfile> finding_profile(const Reproducer& r) {
  const Signature& sig = r.finding.signature;
  if (sig.cls == FindingClass::crash || sig.cls == FindingClass::timeout || sig.tensor == "-") return std::nullopt;
  std::unique_ptr<Backend> be;
  for (const auto& name : r.backends) {
    try {
      auto b = make_backend(name);
      if (b->name() == sig.backend) be = std::move(b);
    } catch (const std::exception&) {
    }
  }
  if (!be) return std::nullopt;
  try {
    const Inputs in = generate_inputs(r.c);
    ReferenceBackend ref;
    const Composition comp = sig.composition == "single" ? Composition{} : r.c.composition;
    const ComposedResult want = run_composition(ref, r.c, in, Composition{});
    const ComposedResult got = run_composition(*be, r.c, in, comp);
    const std::map<std::string, std::pair<const Tensor*, const Tensor*>> t{
        {"O", {&got.fwd.o, &want.fwd.o}}, {"LSE", {&got.fwd.lse, &want.fwd.lse}}, {"dQ", {&got.grads.dq, &want.grads.dq}},
        {"dK", {&got.grads.dk, &want.grads.dk}}, {"dV", {&got.grads.dv, &want.grads.dv}}};
    auto it = t.find(sig.tensor);
    if (it == t.end()) return std::nullopt;
    const Tensor &a = *it->second.first, &b = *it->second.second;
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
