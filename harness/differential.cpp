#include "harness/differential.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <stdexcept>
#include <tuple>

#include "harness/inputs.h"
#include "harness/parallel.h"
#include "harness/worker.h"

namespace attnfuzz {
namespace {

bool needs_lse(const Composition& c) {
  if (c.kind == Composition::Kind::kv_split || c.kind == Composition::Kind::mask_partition) return true;
  for (const auto& ch : c.children)
    if (needs_lse(ch)) return true;
  return false;
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

// A naive baseline as the backend under test runs it: without dLSE in the backward, the
// composition engine adds that term with extra calls, and their rounding belongs to the
// baseline too (the engine hands such a backend no dLSE: harness/compose.cpp). A baseline whose
// backward took dLSE as well would count the term twice, and its bounds on dQ and dK would sit
// 50-300 times above the natural error of LibTorch's and cuDNN's backends (docs/verdicts.md).
class BaselineAs final : public Backend {
 public:
  BaselineAs(std::unique_ptr<Backend> inner, bool takes_dlse) : inner_(std::move(inner)), takes_dlse_(takes_dlse) {}
  std::string name() const override { return inner_->name(); }
  std::optional<Contract> contract(DType d) const override { return inner_->contract(d); }
  SupportEnvelope envelope() const override { return inner_->envelope(); }
  bool backward_takes_dlse() const override { return takes_dlse_; }
  Forward forward(const Problem& p) override { return inner_->forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return inner_->backward(p, f, d_out, d_lse);
  }

 private:
  std::unique_ptr<Backend> inner_;
  bool takes_dlse_;
};

}  // namespace

class DifferentialSession::Impl {
 public:
  Impl(const Case& c, const OracleSet& o, const DiffOptions& opt)
      : c_(c), oracles_(o), opt_(opt), in_(generate_inputs(c)), reducer_(o.verdict_reducer ? o.verdict_reducer() : nullptr) {
    report_.input_checksum = checksum(in_);
    // Non-finite inputs reach the backends as drawn; the oracles compute the finite problem
    // (docs/semantics.md, "Non-finite inputs").
    if (has_nonfinite(in_)) finite_in_ = finite_part(in_);
    report_.rule = opt_.rule;
    // On the GPU, before any backend: a backend's fault must not be met first by an oracle.
    if (oracles_.reference->on_gpu()) ensure_reference();
  }

  const Inputs& inputs() const { return in_; }
  const ComposedResult& reference() {
    ensure_reference();
    return ref_;
  }

  // The float64 reference, its fully masked rows and the error terms, computed (by a CPU oracle
  // set) when the first outputs are to be judged: a case that every backend refuses
  // (torch.flash refuses most of the toy mix: fp32, arbitrary masks, softcap) costs no oracle
  // call. They depend on the case alone, so when they are computed changes no number.
  void ensure_reference() {
    if (reference_ready_) return;
    const WorkHeartbeat harness_work(kHarnessWorkProgress, "the reference and the error terms");
    const Inputs& in = oracle_inputs();
    ref_ = run_composition(*oracles_.reference, c_, in, Composition{}, false, &leaves_);
    skip_ = masked_rows(ref_);
    // The reach within the batch entry, and, where some input is not finite (else the two are the
    // same), across the batch for the backends that mix its entries (Backend::mixes_batch_entries).
    for (const bool across : {false, true}) {
      if (across && !finite_in_) break;
      Unjudged& u = unjudged_[across];
      for (TensorId t : kOutputs) {
        if (!case_has_output(c_, t)) continue;
        std::vector<uint8_t>& rows = u.rows[output_index(t)];
        if (q_indexed(t)) rows = skip_;
        if (!finite_in_) continue;
        const std::vector<uint8_t> reached = rows_reached_by_nonfinite(c_, in_, t, across);
        if (rows.empty()) rows.assign(reached.size(), 0);
        for (size_t r = 0; r < rows.size(); ++r) rows[r] |= reached[r];
        if (q_indexed(t)) {  // the masked rows' convention is not checked where the inputs were not finite
          u.masked_unreached = skip_;
          for (size_t r = 0; r < reached.size(); ++r) u.masked_unreached[r] &= !reached[r];
        }
      }
    }
    if (oracles_.error_terms) {
      // The whole problem: the reference's leaf, made above.
      const std::shared_ptr<const Problem> whole =
          leaves_.get(LeafKey{&in, 0, c_.shape.seq_q, 0, c_.shape.seq_kv, {}}, [&] { return full_problem(c_, in); });
      const Problem& full = *whole;
      terms_ = oracles_.error_terms(full, ref_.fwd, in.d_out, in.d_lse);
      attach_row_lse(*terms_, ref_.fwd.lse);
      attach_directions(*terms_, full, in.d_out);
    }
    reference_ready_ = true;
  }

  void run_backend(Backend& be) {
    if (opt_.on_backend) opt_.on_backend(be.name());
    std::vector<Composition> comps;
    if (opt_.include_single || c_.composition == Composition{}) comps.push_back(Composition{});
    if (!(c_.composition == Composition{})) comps.push_back(c_.composition);
    for (const auto& comp : comps) {
      // A run refused before any of the backend's code ran (its dtype, no LSE, an earlier GPU
      // error) launched nothing: there is nothing new on the device to look for.
      const bool backend_called = run_one(be, comp);
      if (!backend_called || !be.faults_reach_this_process() || report_.gpu_error || !opt_.gpu_health) continue;
      if (auto err = opt_.gpu_health()) {
        add(be.name(), composition_class(comp), std::nullopt, FindingClass::backend_error,
            "the GPU is unusable after this backend ran: " + *err);
        report_.gpu_error = true;
      }
    }
  }

  BackendRun judge(const Backend& be, const Composition& comp, const ComposedResult& r, std::vector<Finding>* findings) {
    ensure_reference();
    BackendRun run = describe_run(be, comp);
    const auto contract = be.contract(c_.dtype);
    if (!contract) throw std::invalid_argument("judge: the backend has no contract for this dtype");
    run.contract = std::string(to_string(*contract));
    const size_t before = report_.findings.size();
    {
      const WorkHeartbeat harness_work(kHarnessWorkProgress, "the baselines and the verdict");
      judge_numbers(be, *contract, comp, r, run);
    }
    if (findings) findings->assign(report_.findings.begin() + static_cast<std::ptrdiff_t>(before), report_.findings.end());
    report_.findings.resize(before);
    return run;
  }

  DiffReport finish() {
    {
      const WorkHeartbeat harness_work(kHarnessWorkProgress, "the consistency of the backends");
      check_consistency();
    }
    return std::move(report_);
  }

 private:
  // The naive computation under a contract through a composition, as `be` would run it.
  const ComposedResult& emulation(Contract k, bool reversed, const Composition& comp, bool takes_dlse) {
    auto key = std::make_tuple(k, reversed, describe(comp), takes_dlse);
    auto it = emul_.find(key);
    if (it == emul_.end()) {
      BaselineAs be(oracles_.emulate(k, reversed), takes_dlse);
      it = emul_.emplace(key, run_composition(be, c_, oracle_inputs(), comp, false, &leaves_)).first;
    }
    return it->second;
  }

  // The error model under a contract (the LSE's accuracy, and whether the backend accumulates on
  // tensor cores) for a run through `comp`: each output's sigma and its rows' dof
  // (harness/error_model.h, model_of_call and composed_model).
  const OutputsModel* model(Contract k, double lse_unit, bool tensor_cores, const Composition& comp) {
    if (!terms_) return nullptr;
    auto key = std::make_tuple(k, lse_unit, tensor_cores, describe(comp));
    auto it = models_.find(key);
    if (it == models_.end()) {
      const RoundingUnits u = rounding_units(k, c_.dtype, lse_unit, tensor_cores);
      const OutputTensors ref = outputs_of(ref_);
      if (comp == Composition{}) {
        it = models_.emplace(key, model_of_call(*terms_, ref, u, oracles_.output_model)).first;
      } else {
        const OutputsModel& whole = *model(k, lse_unit, tensor_cores, Composition{});  // cached: the single call's
        const CallTerms& calls = call_terms(comp);
        std::vector<CallOfComposition> parts;
        for (size_t c = 0; c < calls.records.size(); ++c) {
          const CallRecord& call = calls.records[c];
          parts.push_back({&calls.terms[c],
                           {&call.fwd.o, &call.fwd.lse, &call.grads.dq, &call.grads.dk, &call.grads.dv, &call.grads.dbias},
                           &calls.weights[c],
                           call.problem.q_offset,
                           call.problem.kv_offset});
        }
        it = models_.emplace(key, composed_model(parts, ref, whole, u, oracles_.output_model)).first;
      }
    }
    return &it->second;
  }

  static OutputTensors outputs_of(const ComposedResult& r) {
    OutputTensors t{};
    for (TensorId o : kOutputs) t[output_index(o)] = &r[o];
    return t;
  }

  // The float64 reference through a composition, every call kept with its error terms and the
  // weight w = exp(LSE_call - LSE) with which its O and LSE reach the whole output.
  struct CallTerms {
    std::vector<CallRecord> records;
    std::vector<ErrorTerms> terms;
    std::vector<Tensor> weights;
  };
  const CallTerms& call_terms(const Composition& comp) {
    auto it = call_terms_.find(describe(comp));
    if (it != call_terms_.end()) return it->second;
    CallTerms ct;
    ct.records = run_composition(*oracles_.reference, c_, oracle_inputs(), comp, true, &leaves_).calls;
    for (const CallRecord& call : ct.records) {
      ct.terms.push_back(oracles_.error_terms(call.problem, call.fwd, call.d_out, call.d_lse));
      attach_row_lse(ct.terms.back(), call.fwd.lse);
      attach_directions(ct.terms.back(), call.problem, call.d_out);
      Tensor w(call.fwd.lse.shape);
      const auto& s = w.shape;
      for (int64_t b = 0; b < s[0]; ++b)
        for (int64_t h = 0; h < s[1]; ++h)
          for (int64_t q = 0; q < s[2]; ++q) {
            const double l = *call.fwd.lse.at(b, h, q), whole = *ref_.fwd.lse.at(b, h, q + call.problem.q_offset);
            *w.at(b, h, q) = std::isfinite(l) && std::isfinite(whole) ? std::exp(l - whole) : 0.0;
          }
      ct.weights.push_back(std::move(w));
    }
    return call_terms_.emplace(describe(comp), std::move(ct)).first->second;
  }

  // The errors of the fingerprint ladder's emulations of output t through comp: the same for
  // every backend run there with the same dLSE handling, so computed once (the comparisons of
  // a real-size tensor at once, each its own sum in its own order).
  const std::vector<std::pair<Contract, ErrorStats>>& rung_errors(const Composition& comp, bool takes_dlse, TensorId t) {
    auto key = std::make_tuple(describe(comp), takes_dlse, t);
    auto it = rung_errors_.find(key);
    if (it != rung_errors_.end()) return it->second;
    std::vector<const Tensor*> rung_outputs;
    std::vector<std::pair<Contract, ErrorStats>> errors;
    for (Contract k : fingerprint_ladder(c_.dtype)) {
      rung_outputs.push_back(&emulation(k, false, comp, takes_dlse)[t]);  // device calls stay on this thread
      errors.emplace_back(k, ErrorStats{});
    }
    if (reducer_)  // on the device, from this thread
      for (size_t i = 0; i < errors.size(); ++i)
        errors[i].second = reducer_->compare(*rung_outputs[i], ref_[t], unjudged_rows(t), overflow_of(t));
    else
      parallel_tasks(errors.size(), ref_[t].numel() >= parallel_min_elements(),
                     [&](size_t i) { errors[i].second = error_of(*rung_outputs[i], t); });
    return rung_errors_.emplace(key, std::move(errors)).first->second;
  }

  static bool q_indexed(TensorId t) { return t == TensorId::O || t == TensorId::LSE || t == TensorId::dQ; }

  struct Unjudged {
    std::array<std::vector<uint8_t>, kOutputs.size()> rows;  // per output (unjudged_rows)
    std::vector<uint8_t> masked_unreached;                    // skip_ without the rows non-finite inputs reach
  };
  // The inputs the oracles compute with: the drawn ones, or their finite part.
  const Inputs& oracle_inputs() const { return finite_in_ ? *finite_in_ : in_; }
  // The rows of output o left out of the verdict (fully masked, or reached by a non-finite
  // input), or null when none is.
  const Unjudged& unjudged(bool across_batch) const { return unjudged_[across_batch && finite_in_]; }
  const std::vector<uint8_t>* unjudged_rows(TensorId o, bool across_batch = false) const {
    const std::vector<uint8_t>& rows = unjudged(across_batch).rows[output_index(o)];
    return rows.empty() ? nullptr : &rows;
  }
  ErrorStats error_of(const Tensor& t, TensorId o) const { return compare(t, ref_[o], unjudged_rows(o), overflow_of(o)); }
  // An upper bound of the backward's intermediates dP = dO V^T and dS = P (dP - D + g) (and so of
  // what a kernel stores of them in the case dtype): |dP_ij| <= |dO_i| |V_j| and
  // |D_i| = |dO_i . O_i| <= |dO_i| max_j |V_j| (O is an average of V's rows), so
  // |dS_ij| <= 2 max_i |dO_i| max_j |V_j| + max |g|. Computed once, from the inputs.
  double gradient_intermediates_bound() const {
    if (intermediates_bound_ < 0) {
      auto largest_row = [](const Tensor& t) {
        const size_t w = static_cast<size_t>(t.shape.back());
        double m = 0;
        for (size_t r = 0; r * w < t.numel(); ++r) {
          double n2 = 0;
          for (size_t d = 0; d < w; ++d) n2 += t.data[r * w + d] * t.data[r * w + d];
          m = std::max(m, n2);
        }
        return std::sqrt(m);
      };
      double g = 0;
      const Inputs& in = oracle_inputs();
      for (double x : in.d_lse.data) g = std::max(g, std::fabs(x));
      intermediates_bound_ = 2.0 * largest_row(in.d_out) * largest_row(in.v) + g;
    }
    return intermediates_bound_;
  }
  // Where output o's storage type (the LSE's fp32, the case dtype otherwise) rounds to infinity.
  double overflow_of(TensorId o) const { return overflow_threshold(o == TensorId::LSE ? DType::f32 : c_.dtype); }

  void add(const std::string& backend, CompositionClass comp, std::optional<TensorId> tensor, FindingClass cls, std::string detail,
           std::map<FindingMetric, double> metrics = {}) {
    Finding f;
    f.signature = {backend, comp, tensor, cls, c_.dtype, signature_kind(c_.mask)};
    f.detail = std::move(detail);
    f.metrics = std::move(metrics);
    report_.findings.push_back(std::move(f));
  }

  BackendRun describe_run(const Backend& be, const Composition& comp) const {
    BackendRun run;
    run.backend = be.name();
    run.api = be.api();
    run.lse_unit_roundoff = be.lse_unit_roundoff(c_.dtype);
    run.version = be.version();
    run.composition = describe(comp);
    run.composition_class = composition_class(comp);
    if (const std::vector<TensorId> may_differ = be.nondeterministic_outputs(); !may_differ.empty()) {
      std::string names;
      for (TensorId t : may_differ) names += (names.empty() ? "" : ", ") + std::string(to_string(t));
      run.notes.push_back(be.name() + " declares " + names + " nondeterministic (" + be.why_nondeterministic() + "): not checked bitwise");
    }
    return run;
  }

  // One backend through one composition: the skip policy, the run, then each check. Returns
  // whether any of the backend's code ran (false: refused by the skip policy alone).
  bool run_one(Backend& be, const Composition& comp) {
    BackendRun run = describe_run(be, comp);
    const auto contract = be.contract(c_.dtype);
    if (const auto why = why_not_run(be, comp, contract)) {
      run.skipped = true;
      run.skip_reason = *why;
      report_.runs.push_back(std::move(run));
      return false;
    }
    run.contract = std::string(to_string(*contract));
    ComposedResult r;
    try {
      r = run_composition(be, c_, in_, comp, false, &leaves_);
    } catch (const UnsupportedError& e) {
      run.skipped = true;
      run.skip_reason = e.what();
      report_.runs.push_back(std::move(run));
      return true;
    } catch (const std::bad_alloc&) {
      // Out of memory is this process's limit (the case outgrew the memory estimate), not the
      // backend's fault: never a finding. The caller ends with an error (run: exit 3; a worker
      // replies with an error, so the campaign counts the case unjudged).
      throw;
    } catch (const std::exception& e) {
      add(run.backend, run.composition_class, std::nullopt, class_of(e), e.what());
      report_.gpu_error = report_.gpu_error || be.faults_reach_this_process();
      run.skipped = true;
      run.skip_reason = std::string("error: ") + e.what();
      report_.runs.push_back(std::move(run));
      return true;
    }
    ensure_reference();
    run.notes.insert(run.notes.end(), r.notes.begin(), r.notes.end());  // after describe_run's own
    run.backend_calls = r.backend_calls;
    if (opt_.check_determinism) check_determinism(be, comp, r, run);
    if (opt_.check_determinism && (be.batch_invariant() || opt_.batch_invariance_undeclared)) check_batch_invariance(be, comp, r, run);
    check_all_written(r, run);
    check_masked_rows(be, r, run);
    try {
      const WorkHeartbeat harness_work(kHarnessWorkProgress, "the baselines and the verdict");
      judge_numbers(be, *contract, comp, r, run);
    } catch (const UnsupportedError& e) {
      // The baselines run as the backend does (BaselineAs); a call they cannot make leaves
      // nothing to judge against: not the backend's finding.
      run.tensors.clear();
      run.skipped = true;
      run.skip_reason = std::string("its contract baselines cannot run the case: ") + e.what();
    }
    report_.runs.push_back(std::move(run));
    return true;
  }

  // Why the backend does not run this composition here, or nothing when it does.
  std::optional<std::string> why_not_run(const Backend& be, const Composition& comp, const std::optional<Contract>& contract) const {
    // A CUDA error is sticky: whatever runs on the device after it fails too, and would be
    // blamed for the first one's fault.
    if (be.faults_reach_this_process() && report_.gpu_error)
      return "not run: an earlier GPU error in this process may have left the device unusable";
    if (!contract) return "dtype " + std::string(to_string(c_.dtype)) + " not supported";
    if (needs_lse(comp) && !be.returns_lse()) return "returns no LSE, so its parts cannot be merged";
    return std::nullopt;
  }

  // What a backend's exception is a finding of: a write out of bounds, or an error.
  static FindingClass class_of(const std::exception& e) {
    return dynamic_cast<const OutOfBoundsWrite*>(&e) ? FindingClass::out_of_bounds : FindingClass::backend_error;
  }

  // A second run on identical inputs must give identical bits.
  void check_determinism(Backend& be, const Composition& comp, const ComposedResult& r, const BackendRun& run) {
    try {
      const ComposedResult again = run_composition(be, c_, in_, comp, false, &leaves_);
      const std::vector<TensorId> may_differ = be.nondeterministic_outputs();
      for (TensorId t : kOutputs) {
        if (!case_has_output(c_, t) || (t == TensorId::LSE && !be.returns_lse())) continue;
        if (std::find(may_differ.begin(), may_differ.end(), t) != may_differ.end()) continue;
        if (!bitwise_equal(r[t], again[t]))
          add(run.backend, run.composition_class, t, FindingClass::nondeterministic,
              "two runs on identical inputs differ bitwise");
      }
    } catch (const std::bad_alloc&) {
      throw;  // as in run_one: never a finding
    } catch (const std::exception& e) {
      add(run.backend, run.composition_class, std::nullopt, class_of(e), std::string("second run: ") + e.what());
      report_.gpu_error = report_.gpu_error || be.faults_reach_this_process();
    }
  }

  // The case's problems inside a larger batch (batch_invariance_batch) must give the same bits,
  // where the backend promises it. The larger batch shrinks toward B + 1 to fit the memory
  // budget the backend's own run needs (the oracles do not run for it).
  void check_batch_invariance(Backend& be, const Composition& comp, const ComposedResult& r, BackendRun& run) {
    Case larger = c_;
    larger.shape.batch = batch_invariance_batch(c_.shape, be.device());
    const HostWork work{HostWork::Oracles::device, be.host_scores()};
    const uint64_t budget = Limits{}.memory_budget_bytes;
    while (larger.shape.batch > c_.shape.batch + 1 && estimate_host_bytes(larger, work) > budget)
      larger.shape.batch = std::max(c_.shape.batch + 1, larger.shape.batch / 2);
    conform_ragged(larger);  // a ragged batch keeps its sequences; the added ones are full length
    const std::string where = "inside a batch of " + std::to_string(larger.shape.batch);
    if (estimate_host_bytes(larger, work) > budget) {
      run.notes.push_back("batch invariance not checked: the case " + where + " is over the memory budget");
      return;
    }
    try {
      const ComposedResult in_batch = run_composition(be, larger, generate_inputs(larger), comp);
      const std::vector<TensorId> may_differ = be.nondeterministic_outputs();
      std::string moved;  // an undeclared backend's measurement, for its note
      for (TensorId t : kOutputs) {
        if (!case_has_output(c_, t) || (t == TensorId::LSE && !be.returns_lse())) continue;
        if (std::find(may_differ.begin(), may_differ.end(), t) != may_differ.end()) continue;
        const size_t n = bits_differing_from_prefix(r[t], in_batch[t]);
        if (n && !be.batch_invariant()) moved += (moved.empty() ? "" : ", ") + std::string(to_string(t)) + " " + std::to_string(n);
        if (n && be.batch_invariant())
          add(run.backend, run.composition_class, t, FindingClass::batch_variant,
              std::to_string(n) + " elements differ bitwise with the case's problems " + where + " (the backend declares batch invariance)",
              {{FindingMetric::count, double(n)}});
      }
      if (!be.batch_invariant())
        run.notes.push_back("batch invariance (not declared): " +
                            (moved.empty() ? "no bit moved " + where : "elements moved " + where + ": " + moved));
    } catch (const std::bad_alloc&) {
      throw;  // as in run_one: never a finding
    } catch (const std::exception& e) {
      add(run.backend, run.composition_class, std::nullopt, class_of(e), "the case's problems " + where + ": " + e.what());
      report_.gpu_error = report_.gpu_error || be.faults_reach_this_process();
    }
  }

  // How many elements of `alone` differ in their bits from the first elements of `in_batch`
  // (the same tensor with more batches after them); every element when the shapes disagree.
  static size_t bits_differing_from_prefix(const Tensor& alone, const Tensor& in_batch) {
    const bool same_rows = alone.shape.size() == in_batch.shape.size() && !alone.shape.empty() &&
                           std::equal(alone.shape.begin() + 1, alone.shape.end(), in_batch.shape.begin() + 1) &&
                           in_batch.numel() >= alone.numel();
    if (!same_rows) return alone.numel();
    size_t n = 0;
    for (size_t i = 0; i < alone.data.size(); ++i) n += std::memcmp(&alone.data[i], &in_batch.data[i], sizeof(double)) != 0;
    return n;
  }

  // Every output element must have been written (the harness poisons them first).
  void check_all_written(const ComposedResult& r, const BackendRun& run) {
    for (const auto* counts : {&r.fwd.unwritten, &r.grads.unwritten})
      for (const auto& [tensor, n] : *counts)
        if (n)
          add(run.backend, run.composition_class, tensor, FindingClass::unwritten, std::to_string(n) + " elements never written",
              {{FindingMetric::count, double(n)}});
  }

  // Fully masked rows follow the convention (O = 0, LSE = -inf, no gradient) when the backend says so.
  void check_masked_rows(const Backend& be, const ComposedResult& r, BackendRun& run) {
    if (!be.masked_rows_zero()) {
      if (std::any_of(skip_.begin(), skip_.end(), [](uint8_t x) { return x != 0; }))
        run.notes.push_back("fully masked rows not compared: the backend does not follow the O = 0 / LSE = -inf convention");
      return;
    }
    for (TensorId t : {TensorId::O, TensorId::LSE, TensorId::dQ}) {
      if (t == TensorId::LSE && !be.returns_lse()) continue;
      const size_t bad = convention_breaks(r[t], finite_in_ ? unjudged(be.mixes_batch_entries()).masked_unreached : skip_, t == TensorId::LSE);
      if (bad)
        add(run.backend, run.composition_class, t, FindingClass::semantic,
            std::to_string(bad) + " fully masked rows break the convention (O = 0, LSE = -inf, no gradient)", {{FindingMetric::rows, double(bad)}});
    }
  }

  // Every output against the float64 reference under the rule (harness/tolerance.h).
  void judge_numbers(const Backend& be, Contract contract, const Composition& comp, const ComposedResult& r, BackendRun& run) {
    const CompositionClass comp_class = composition_class(comp);
    const bool takes_dlse = be.backward_takes_dlse();
    const ComposedResult& base_fwd = emulation(contract, false, comp, takes_dlse);
    const ComposedResult& base_rev = emulation(contract, true, comp, takes_dlse);
    const OutputsModel* error_model = model(contract, be.lse_unit_roundoff(c_.dtype), be.accumulates_on_tensor_cores(), comp);
    for (TensorId t : kOutputs) {
      const size_t i = output_index(t);
      if (!case_has_output(c_, t)) continue;
      if (t == TensorId::LSE && !be.returns_lse()) {
        TensorVerdict v;
        v.tensor = t;
        v.compared = false;
        run.tensors.push_back(v);
        continue;
      }
      JudgeInput in;
      in.impl = &r[t];
      in.ref = &ref_[t];
      in.baseline_fwd = &base_fwd[t];
      in.baseline_rev = &base_rev[t];
      in.sigma = error_model ? &error_model->sigma[i] : nullptr;
      in.row_dof = error_model ? &error_model->row_dof[i] : nullptr;
      in.shared = error_model ? &error_model->shared[i] : nullptr;
      in.skip_rows = unjudged_rows(t, be.mixes_batch_entries());
      // A product below fp32's smallest normal is flushed (FTZ kernels, tensor cores), so each
      // of the L terms of an element's reduction may lose up to 2^-126: a floor on the allowance
      // (P itself below 2^-126 is the error model's underflow term). Beside the storage type's
      // smallest subnormal it matters only for elements near 1e-35 (H-4: dV rows of 1e-37).
      in.tiny = t == TensorId::LSE ? 0.0 : std::max(smallest_subnormal(c_.dtype), kSmallestNormalF32 * reduction_length(t, c_.shape));
      in.overflow = overflow_of(t);
      // fp32's range is out of reach for the inputs check_magnitudes admits (dO V^T within it): the
      // bound is worth its pass over dO and V for the 16-bit types only.
      in.intermediates_overflow = c_.dtype != DType::f32 && kind_of(t) == TensorKind::gradient &&
                                  gradient_intermediates_bound() >= overflow_threshold(c_.dtype);
      const double u_acc = rounding_units(contract, c_.dtype, 0.0).accumulate;
      in.row_scale_variance = u_acc * u_acc * reduction_length(t, c_.shape);
      in.rungs = &rung_errors(comp, takes_dlse, t);
      in.declared = contract;
      in.coarsest_held = coarser_of(contract, coarsest_declarable(c_.dtype));
      TensorVerdict v = judge_tensor(t, in, opt_.rule, reducer_.get());
      if (v.err.nonfinite_under_contract)
        run.notes.push_back(std::string(name_of(t)) + ": " + std::to_string(v.err.nonfinite_under_contract) +
                            " NaN/Inf elements not judged: " +
                            (in.intermediates_overflow ? "dO V^T may reach " + std::to_string(gradient_intermediates_bound()) + ", past " +
                                                             std::string(to_string(c_.dtype)) + "'s range"
                                                       : "the naive computation under the " + std::string(to_string(contract)) +
                                                             " contract is not finite there either"));
      if (!v.pass) add(run.backend, comp_class, t, *v.failure, failure_detail(v, contract), failure_metrics(v));
      run.tensors.push_back(v);
    }
  }

  // Backends that declare the same contract should compute at the same precision: passing runs
  // whose fingerprints land on different rungs disagree, when the ladder tells those rungs apart
  // on this tensor (their errors a band apart) and the two errors are a band apart too. A
  // contract is a range (fp32 accumulation up to operands rounded to it), and where the output's
  // own rounding dominates every rung (bf16, fp16 storage) no label means anything.
  void check_consistency() {
    for (size_t a = 0; a < report_.runs.size(); ++a)
      for (size_t b = a + 1; b < report_.runs.size(); ++b) {
        const BackendRun &x = report_.runs[a], &y = report_.runs[b];
        if (x.skipped || y.skipped || x.contract != y.contract || x.composition != y.composition || x.backend == y.backend) continue;
        // Only implementations of one API promise each other their numerics (Backend::api); one
        // that declares a coarser LSE (a fast exp) promises less than its contract.
        if (x.api.empty() || x.api != y.api || x.lse_unit_roundoff != y.lse_unit_roundoff) continue;
        for (size_t i = 0; i < x.tensors.size() && i < y.tensors.size(); ++i) {
          const TensorVerdict &u = x.tensors[i], &v = y.tensors[i];
          if (!u.compared || !v.compared || !u.pass || !v.pass || !u.print.rung || !v.print.rung || u.print.rung == v.print.rung) continue;
          auto apart = [](double a, double b) { return std::max(a, b) / std::max(std::min(a, b), 1e-300); };
          if (apart(u.print.rung_rms, v.print.rung_rms) < opt_.rule.fingerprint_band) continue;
          if (apart(u.err.rms, v.err.rms) < opt_.rule.fingerprint_band) continue;
          add(Signature::pair(x.backend, y.backend), x.composition_class, u.tensor, FindingClass::consistency,
              "both declare " + x.contract + "; " + x.backend + " computes like " + u.print.name() + ", " + y.backend + " like " +
                  v.print.name(),
              {{FindingMetric::rms_a, u.err.rms}, {FindingMetric::rms_b, v.err.rms}});
        }
      }
  }

  const Case& c_;
  const OracleSet& oracles_;
  DiffOptions opt_;
  Inputs in_;
  LeafProblems leaves_;  // every run's leaf problems, of in_ and of finite_in_
  bool reference_ready_ = false;
  ComposedResult ref_;
  std::vector<uint8_t> skip_;
  std::optional<Inputs> finite_in_;  // the inputs' finite part, where some input is not finite
  std::array<Unjudged, 2> unjudged_;  // [across_batch]; [true] only where some input is not finite
  mutable double intermediates_bound_ = -1;
  std::optional<ErrorTerms> terms_;
  std::map<std::tuple<Contract, bool, std::string, bool>, ComposedResult> emul_;
  std::map<std::tuple<Contract, double, bool, std::string>, OutputsModel> models_;
  std::map<std::string, CallTerms> call_terms_;
  std::map<std::tuple<std::string, bool, TensorId>, std::vector<std::pair<Contract, ErrorStats>>> rung_errors_;
  DiffReport report_;
  // Declared last, so destroyed first: it may keep the tensors above on the device.
  std::unique_ptr<VerdictReducer> reducer_;
};

DifferentialSession::DifferentialSession(const Case& c, const OracleSet& oracles, const DiffOptions& opt)
    : impl_(std::make_unique<Impl>(c, oracles, opt)) {}
DifferentialSession::~DifferentialSession() = default;
const Inputs& DifferentialSession::inputs() const { return impl_->inputs(); }
const ComposedResult& DifferentialSession::reference() const { return impl_->reference(); }
void DifferentialSession::run_backend(Backend& be) { impl_->run_backend(be); }
BackendRun DifferentialSession::judge(const Backend& be, const Composition& comp, const ComposedResult& outputs,
                                      std::vector<Finding>* findings) {
  return impl_->judge(be, comp, outputs, findings);
}
DiffReport DifferentialSession::finish() { return impl_->finish(); }

int64_t batch_invariance_batch(const Shape& s, Device device) {
  const int64_t work_items = device == Device::cpu ? kBatchInvarianceCpuWorkItems : kBatchInvarianceGpuWorkItems;
  const int64_t per_batch = std::max<int64_t>(1, s.heads_q * ((s.seq_q + 63) / 64));
  const int64_t filling = (work_items + per_batch - 1) / per_batch;
  const int64_t cap = device == Device::cpu ? kBatchInvarianceCpuFactor * s.batch : kBatchInvarianceMaxBatch;
  return std::max(2 * s.batch + 1, std::min(filling, cap));
}

CompositionClass composition_class(const Composition& c) {
  if (c.kind == Composition::Kind::single) return CompositionClass::single;
  return needs_lse(c) ? CompositionClass::merged : CompositionClass::q_split;
}

DiffReport run_differential(const Case& c, const std::vector<Backend*>& backends, const OracleSet& oracles, const DiffOptions& opt) {
  DifferentialSession d(c, oracles, opt);
  for (Backend* be : backends) d.run_backend(*be);
  return d.finish();
}

}  // namespace attnfuzz
