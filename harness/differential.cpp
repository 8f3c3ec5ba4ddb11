#include "harness/differential.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "harness/inputs.h"

namespace attnfuzz {
namespace {

constexpr const char* kTensorNames[5] = {"O", "LSE", "dQ", "dK", "dV"};

bool needs_lse(const Composition& c) {
  if (c.kind == Composition::Kind::kv_split || c.kind == Composition::Kind::mask_partition) return true;
  for (const auto& ch : c.children)
    if (needs_lse(ch)) return true;
  return false;
}

std::array<const Tensor*, 5> tensors_of(const ComposedResult& r) {
  return {&r.fwd.o, &r.fwd.lse, &r.grads.dq, &r.grads.dk, &r.grads.dv};
}

// Rows of [B][Hq][Sq] whose reference LSE is -inf (fully masked).
std::vector<uint8_t> masked_rows(const ComposedResult& ref) {
  std::vector<uint8_t> rows(ref.fwd.lse.numel());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = ref.fwd.lse.data[i] == -std::numeric_limits<double>::infinity();
  return rows;
}

// Which fully masked rows break the convention in a q-indexed tensor (O, dQ: rows must be
// exactly 0; LSE: must be -inf).
size_t convention_breaks(const Tensor& t, const std::vector<uint8_t>& rows, bool is_lse) {
  const size_t row = t.shape.size() > 3 ? static_cast<size_t>(t.shape.back()) : 1;
  size_t bad = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r]) continue;
    for (size_t i = r * row; i < (r + 1) * row; ++i) {
      const double x = t.data[i];
      if (is_lse ? x != -std::numeric_limits<double>::infinity() : x != 0.0) {
        ++bad;
        break;
      }
    }
  }
  return bad;
}

ErrorStats worse(const ErrorStats& a, const ErrorStats& b) {
  ErrorStats w = a;
  w.rms = std::max(a.rms, b.rms);
  w.max_abs = std::max(a.max_abs, b.max_abs);
  w.rel_fro = std::max(a.rel_fro, b.rel_fro);
  w.mean_abs = std::max(a.mean_abs, b.mean_abs);
  return w;
}

class Differential {
 public:
  Differential(const Case& c, const OracleSet& o, const DiffOptions& opt) : c_(c), oracles_(o), opt_(opt), in_(generate_inputs(c)) {
    ref_ = run_composition(*oracles_.reference, c_, in_, Composition{});
    skip_ = masked_rows(ref_);
    if (oracles_.magnitudes) {
      const Problem full = full_problem(c_, in_);
      mags_ = oracles_.magnitudes(full, ref_.fwd, in_.d_out, in_.d_lse);
    }
    report_.input_checksum = checksum(in_);
    report_.rule = opt_.rule;
  }

  void run_backend(Backend& be) {
    if (opt_.on_backend) opt_.on_backend(be.name());
    std::vector<Composition> comps;
    if (opt_.include_single || c_.composition == Composition{}) comps.push_back(Composition{});
    if (!(c_.composition == Composition{})) comps.push_back(c_.composition);
    for (const auto& comp : comps) {
      run_one(be, comp);
      if (be.device() == "cpu" || report_.gpu_error || !opt_.gpu_health) continue;
      if (auto err = opt_.gpu_health()) {
        add(be.name(), composition_class(comp), "-", FindingClass::backend_error, "the GPU is unusable after this backend ran: " + *err);
        report_.gpu_error = true;
      }
    }
  }

  DiffReport finish() {
    check_consistency();
    return std::move(report_);
  }

 private:
  const ComposedResult& emulation(Contract k, bool reversed) {
    auto key = std::make_pair(k, reversed);
    auto it = emul_.find(key);
    if (it == emul_.end()) {
      auto be = oracles_.emulate(k, reversed);
      it = emul_.emplace(key, run_composition(*be, c_, in_, Composition{})).first;
    }
    return it->second;
  }

  ErrorStats error_of(const Tensor& t, int idx) const {
    const bool q_indexed = idx == 0 || idx == 1 || idx == 2;
    return compare(t, *tensors_of(ref_)[static_cast<size_t>(idx)], q_indexed ? &skip_ : nullptr);
  }

  void add(const std::string& backend, const std::string& comp, const std::string& tensor, FindingClass cls, std::string detail,
           std::map<std::string, double> metrics = {}) {
    Finding f;
    f.signature = {backend, comp, tensor, cls, std::string(to_string(c_.dtype)), signature_kind(c_.mask)};
    f.detail = std::move(detail);
    f.metrics = std::move(metrics);
    report_.findings.push_back(std::move(f));
  }

  void run_one(Backend& be, const Composition& comp) {
    BackendRun run;
    run.backend = be.name();
    run.version = be.version();
    run.composition = describe(comp);
    run.composition_class = composition_class(comp);
    const std::string comp_class = run.composition_class;
    const bool on_gpu = be.device() != "cpu";
    if (on_gpu && report_.gpu_error) {
      // A CUDA error is sticky: whatever runs on the device after it fails too, and would be
      // blamed for the first one's fault.
      run.skipped = true;
      run.skip_reason = "not run: an earlier GPU error in this process may have left the device unusable";
      report_.runs.push_back(std::move(run));
      return;
    }
    const auto contract = be.contract(c_.dtype);
    if (!contract) {
      run.skipped = true;
      run.skip_reason = "dtype " + std::string(to_string(c_.dtype)) + " not supported";
      report_.runs.push_back(std::move(run));
      return;
    }
    run.contract = std::string(to_string(*contract));
    if (needs_lse(comp) && !be.returns_lse()) {
      run.skipped = true;
      run.skip_reason = "returns no LSE, so its parts cannot be merged";
      report_.runs.push_back(std::move(run));
      return;
    }
    ComposedResult r;
    try {
      r = run_composition(be, c_, in_, comp);
    } catch (const UnsupportedError& e) {
      run.skipped = true;
      run.skip_reason = e.what();
      report_.runs.push_back(std::move(run));
      return;
    } catch (const std::exception& e) {
      add(run.backend, comp_class, "-", FindingClass::backend_error, e.what());
      report_.gpu_error = report_.gpu_error || on_gpu;
      run.skipped = true;
      run.skip_reason = std::string("error: ") + e.what();
      report_.runs.push_back(std::move(run));
      return;
    }
    run.notes = r.notes;
    run.backend_calls = r.backend_calls;
    if (opt_.check_determinism) {
      try {
        const ComposedResult again = run_composition(be, c_, in_, comp);
        for (int i = 0; i < 5; ++i) {
          if (i == 1 && !be.returns_lse()) continue;
          if (!bitwise_equal(*tensors_of(r)[static_cast<size_t>(i)], *tensors_of(again)[static_cast<size_t>(i)]))
            add(run.backend, comp_class, kTensorNames[i], FindingClass::nondeterministic, "two runs on identical inputs differ bitwise");
        }
      } catch (const std::exception& e) {
        add(run.backend, comp_class, "-", FindingClass::backend_error, std::string("second run: ") + e.what());
        report_.gpu_error = report_.gpu_error || on_gpu;
      }
    }
    for (const auto* counts : {&r.fwd.unwritten, &r.grads.unwritten})
      for (const auto& [tensor, n] : *counts)
        if (n) add(run.backend, comp_class, tensor, FindingClass::unwritten, std::to_string(n) + " elements never written", {{"count", double(n)}});

    if (be.masked_rows_zero()) {
      const std::array<std::pair<int, bool>, 3> q_tensors{{{0, false}, {1, true}, {2, false}}};
      for (const auto& [idx, is_lse] : q_tensors) {
        if (idx == 1 && !be.returns_lse()) continue;
        const size_t bad = convention_breaks(*tensors_of(r)[static_cast<size_t>(idx)], skip_, is_lse);
        if (bad)
          add(run.backend, comp_class, kTensorNames[idx], FindingClass::semantic,
              std::to_string(bad) + " fully masked rows break the convention (O = 0, LSE = -inf, no gradient)", {{"rows", double(bad)}});
      }
    } else if (std::any_of(skip_.begin(), skip_.end(), [](uint8_t x) { return x != 0; })) {
      run.notes.push_back("fully masked rows not compared: the backend does not follow the O = 0 / LSE = -inf convention");
    }

    const ComposedResult& base_fwd = emulation(*contract, false);
    const ComposedResult& base_rev = emulation(*contract, true);
    for (int i = 0; i < 5; ++i) {
      const std::string name = kTensorNames[i];
      const Tensor& t = *tensors_of(r)[static_cast<size_t>(i)];
      if (i == 1 && !be.returns_lse()) {
        TensorVerdict v;
        v.tensor = name;
        v.compared = false;
        run.tensors.push_back(v);
        continue;
      }
      const ErrorStats err = error_of(t, i);
      const ErrorStats base = worse(error_of(*tensors_of(base_fwd)[static_cast<size_t>(i)], i), error_of(*tensors_of(base_rev)[static_cast<size_t>(i)], i));
      // LSE is fp32 for every dtype and lives on an absolute scale (log of a sum): its floor
      // uses the backend's declared LSE accuracy and magnitudes of at least 1.
      const bool lse = i == 1;
      double u = lse ? be.lse_unit_roundoff(c_.dtype) : unit_roundoff(c_.dtype == DType::f32 ? DType::f32 : c_.dtype);
      // Rounding errors of a sum of n terms grow like sqrt(n) u (statistically; n u at worst):
      // O and dQ reduce over the keys, dK and dV over the queries of a group.
      if (!lse) {
        const Shape& sh = c_.shape;
        const double n = (i == 0 || i == 2) ? static_cast<double>(sh.seq_kv) : static_cast<double>(sh.seq_q * sh.group());
        u *= std::sqrt(std::max(1.0, n));
      }
      FloorScale scale{err.ref_rms, err.ref_max_abs, 0.0};
      if (lse) {
        scale.rms = std::max(1.0, err.ref_rms), scale.max = std::max(1.0, err.ref_max_abs);
      } else {
        if (oracles_.magnitudes) {
          const size_t slot = static_cast<size_t>(i == 0 ? 0 : i - 1);
          const std::vector<uint8_t>* rows = i == 0 || i == 2 ? &skip_ : nullptr;
          const ErrorStats ms = compare(mags_[slot], mags_[slot], rows);  // its rms and max
          const ErrorStats ss = compare(mags_[slot + 4], mags_[slot + 4], rows);
          scale.rms = std::max(scale.rms, ms.ref_rms), scale.max = std::max(scale.max, ms.ref_max_abs);
          scale.sens_rms = ss.ref_rms, scale.sens_max = ss.ref_max_abs;
          scale.sens_u = *contract == Contract::fp64 ? unit_roundoff(DType::f32) * 1e-9 : unit_roundoff(DType::f32);
        }
        scale.tiny = smallest_subnormal(c_.dtype);
      }
      TensorVerdict v = judge_tensor(name, err, base, u, scale, opt_.rule);
      double rung_max = 0;  // the max error of the fingerprinted rung's emulation
      if (opt_.fingerprint_all || !v.pass) {
        std::vector<std::pair<Contract, double>> rungs;
        std::map<Contract, double> maxes;
        for (Contract k : fingerprint_ladder(c_.dtype)) {
          const ErrorStats e = error_of(*tensors_of(emulation(k, false))[static_cast<size_t>(i)], i);
          rungs.emplace_back(k, e.rms);
          maxes[k] = e.max_abs;
        }
        v.print = fingerprint(err.rms, rungs, opt_.rule.fingerprint_band);
        if (v.print.rung) rung_max = maxes[*v.print.rung];
      }
      if (!v.pass) {
        std::map<std::string, double> m{{"rms", err.rms}, {"max_abs", err.max_abs}, {"bound_rms", v.bound_rms},
                                        {"bound_max", v.bound_max}, {"baseline_rms", base.rms}, {"baseline_max", base.max_abs}};
        if (err.nonfinite_mismatch) {
          add(run.backend, comp_class, name, FindingClass::nan_inf,
              std::to_string(err.nonfinite_mismatch) + " NaN/Inf elements where the reference is finite", m);
        } else if (v.print.rung && operand_mantissa_bits(*v.print.rung) < operand_mantissa_bits(*contract) &&
                   err.max_abs <= opt_.rule.fingerprint_band * rung_max) {
          // Coarser rounding spreads its error like the coarser rung does, in RMS and in max;
          // a localized bug (one row, one tile) with a similar RMS has a far larger max.
          add(run.backend, comp_class, name, FindingClass::contract_violation,
              "declares " + run.contract + ", computes like " + v.print.label + " (rms " + fmt_double(err.rms) + " > bound " +
                  fmt_double(v.bound_rms) + ")",
              m);
        } else {
          add(run.backend, comp_class, name, FindingClass::mismatch,
              "rms " + fmt_double(err.rms) + " (bound " + fmt_double(v.bound_rms) + "), max " + fmt_double(err.max_abs) + " (bound " +
                  fmt_double(v.bound_max) + "), fingerprint " + v.print.label,
              m);
        }
      }
      run.tensors.push_back(v);
    }
    report_.runs.push_back(std::move(run));
  }

  // Backends that declare the same contract should compute at the same precision:
  // passing runs whose fingerprints land on different rungs, with errors far apart, disagree.
  void check_consistency() {
    for (size_t a = 0; a < report_.runs.size(); ++a)
      for (size_t b = a + 1; b < report_.runs.size(); ++b) {
        const BackendRun &x = report_.runs[a], &y = report_.runs[b];
        if (x.skipped || y.skipped || x.contract != y.contract || x.composition != y.composition || x.backend == y.backend) continue;
        for (size_t i = 0; i < x.tensors.size() && i < y.tensors.size(); ++i) {
          const TensorVerdict &u = x.tensors[i], &v = y.tensors[i];
          if (!u.compared || !v.compared || !u.pass || !v.pass || !u.print.rung || !v.print.rung || u.print.rung == v.print.rung) continue;
          const double ratio = std::max(u.err.rms, v.err.rms) / std::max(std::min(u.err.rms, v.err.rms), 1e-300);
          if (ratio < opt_.rule.fingerprint_band) continue;
          add(x.backend + "~" + y.backend, x.composition_class, u.tensor,
              FindingClass::consistency,
              "both declare " + x.contract + "; " + x.backend + " computes like " + u.print.label + ", " + y.backend + " like " + v.print.label,
              {{"rms_a", u.err.rms}, {"rms_b", v.err.rms}});
        }
      }
  }

  static std::string fmt_double(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3e", x);
    return buf;
  }

  const Case& c_;
  const OracleSet& oracles_;
  const DiffOptions& opt_;
  Inputs in_;
  ComposedResult ref_;
  std::vector<uint8_t> skip_;
  std::map<std::pair<Contract, bool>, ComposedResult> emul_;
  std::array<Tensor, 8> mags_;
  DiffReport report_;
};

}  // namespace

std::string composition_class(const Composition& c) {
  if (c.kind == Composition::Kind::single) return "single";
  return needs_lse(c) ? "merged" : "q_split";
}

DiffReport run_differential(const Case& c, const std::vector<Backend*>& backends, const OracleSet& oracles, const DiffOptions& opt) {
  Differential d(c, oracles, opt);
  for (Backend* be : backends) d.run_backend(*be);
  return d.finish();
}

}  // namespace attnfuzz
