#include "harness/verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "harness/dtype.h"
#include "harness/error_model.h"
#include "harness/parallel.h"

namespace attnfuzz {

std::string to_string(FindingClass c) {
  switch (c) {
    case FindingClass::mismatch:
      return "mismatch";
    case FindingClass::contract_violation:
      return "contract_violation";
    case FindingClass::nan_inf:
      return "nan_inf";
    case FindingClass::semantic:
      return "semantic";
    case FindingClass::nondeterministic:
      return "nondeterministic";
    case FindingClass::batch_variant:
      return "batch_variant";
    case FindingClass::unwritten:
      return "unwritten";
    case FindingClass::consistency:
      return "consistency";
    case FindingClass::backend_error:
      return "backend_error";
    case FindingClass::out_of_bounds:
      return "out_of_bounds";
    case FindingClass::crash:
      return "crash";
    case FindingClass::timeout:
      return "timeout";
  }
  return "?";
}

std::optional<FindingClass> finding_class_from_string(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(FindingClass::timeout); ++i)
    if (to_string(static_cast<FindingClass>(i)) == s) return static_cast<FindingClass>(i);
  return std::nullopt;
}

std::vector<std::string> Signature::blamed_backends() const {
  const auto tilde = backend.find('~');
  if (tilde == std::string::npos) return {backend};
  return {backend.substr(0, tilde), backend.substr(tilde + 1)};
}

std::string_view to_string(CompositionClass c) {
  switch (c) {
    case CompositionClass::none:
      return "-";
    case CompositionClass::single:
      return "single";
    case CompositionClass::q_split:
      return "q_split";
    case CompositionClass::merged:
      return "merged";
  }
  return "?";
}

std::optional<CompositionClass> composition_class_from_string(std::string_view s) {
  for (CompositionClass c : {CompositionClass::none, CompositionClass::single, CompositionClass::q_split, CompositionClass::merged})
    if (to_string(c) == s) return c;
  return std::nullopt;
}

std::string_view to_string(FindingMetric m) {
  switch (m) {
#define ATTNFUZZ_METRIC_NAME(name) \
  case FindingMetric::name:        \
    return #name;
    ATTNFUZZ_FINDING_METRICS(ATTNFUZZ_METRIC_NAME)
#undef ATTNFUZZ_METRIC_NAME
  }
  return "?";
}

std::optional<FindingMetric> finding_metric_from_string(std::string_view s) {
#define ATTNFUZZ_METRIC_PARSE(name) \
  if (s == #name) return FindingMetric::name;
  ATTNFUZZ_FINDING_METRICS(ATTNFUZZ_METRIC_PARSE)
#undef ATTNFUZZ_METRIC_PARSE
  return std::nullopt;
}

std::map<std::string, double> metrics_by_name(const Finding& f) {
  std::map<std::string, double> out;
  for (const auto& [m, v] : f.metrics) out[std::string(to_string(m))] = v;
  return out;
}

std::string Signature::to_string() const {
  return backend + "/" + std::string(attnfuzz::to_string(composition)) + "/" + tensor_name() + "/" + attnfuzz::to_string(cls) + "/" + std::string(attnfuzz::to_string(dtype)) + "/" + mask;
}

std::vector<std::pair<Contract, double>> floor_rungs(std::vector<std::pair<Contract, double>> rung_errors, Contract declared,
                                                     double contract_floor, double storage_floor) {
  for (auto& [k, e] : rung_errors)
    e = std::max(e, operand_mantissa_bits(k) <= operand_mantissa_bits(declared) ? contract_floor : storage_floor);
  return rung_errors;
}

std::string Fingerprint::name() const {
  switch (label) {
    case FingerprintLabel::none:
      return "";
    case FingerprintLabel::unknown:
      return "?";
    case FingerprintLabel::exact:
      return "exact";
    case FingerprintLabel::finer:
      return "finer";
    case FingerprintLabel::rung:
      return rung ? std::string(to_string(*rung)) : "?";
    case FingerprintLabel::coarser:
      return "coarser";
  }
  return "?";
}

std::string_view to_string(Granularity g) {
  switch (g) {
    case Granularity::element:
      return "element";
    case Granularity::row:
      return "row";
    case Granularity::row_along_itself:
      return "row along itself";
    case Granularity::tile:
      return "tile";
    case Granularity::head:
      return "head";
    case Granularity::tensor:
      return "tensor";
  }
  return "?";
}

Fingerprint fingerprint(double impl_rms, const std::vector<std::pair<Contract, double>>& rung_errors, double band) {
  if (rung_errors.empty()) return {FingerprintLabel::unknown, std::nullopt};
  const double finest = rung_errors.front().second, coarsest = rung_errors.back().second;
  const double spread = finest > 0 ? coarsest / finest : 1.0;
  if (impl_rms == 0.0 && finest == 0.0) return {FingerprintLabel::exact, std::nullopt, 0, spread};
  if (coarsest > 0 && impl_rms > band * coarsest) return {FingerprintLabel::coarser, std::nullopt, 0, spread};
  if (finest > 0 && impl_rms * band < finest) return {FingerprintLabel::finer, std::nullopt, 0, spread};
  // Nearest rung in log space.
  double best = std::numeric_limits<double>::infinity(), rung_rms = 0;
  std::optional<Contract> rung;
  const double li = std::log(std::max(impl_rms, 1e-300));
  for (const auto& [c, e] : rung_errors) {
    const double d = std::fabs(li - std::log(std::max(e, 1e-300)));
    if (d < best) {
      best = d;
      rung = c;
      rung_rms = e;
    }
  }
  return {FingerprintLabel::rung, rung, rung_rms, spread};
}

namespace {

// Per-element squared error and squared allowance (sigma'^2), with the rows and
// non-finite elements that are judged elsewhere left out. (Arrays left uninitialized by the
// allocation and filled element by element over threads: a real-size tensor's seven arrays are
// 60 MiB, which a zero fill first would write twice, on one thread.)
struct Elementwise {
  std::unique_ptr<double[]> err, ref, err2, allow2;  // err signed: implementation - reference
  std::unique_ptr<uint8_t[]> used;
  // Elements no correct implementation can get wrong: no rounded term reaches them (the model
  // and the baselines say 0: a key no query sees), so their allowance is the floor alone.
  std::unique_ptr<uint8_t[]> exact;
  // Per row, a hash of its reference values' bits: rows that are copies (every query the same
  // vector, every key too) are computed alike and err alike, so a block counts one of them.
  std::vector<uint64_t> row_hash;
  const Tensor* row_dof = nullptr;                  // [heads][seq], or null
  int64_t rows = 1, heads = 1, seq = 1, width = 1;  // [heads = B*H][seq][width]
};

Elementwise elementwise(const JudgeInput& in, const ToleranceRule& rule, double* kappa_out, double* model_rms_out) {
  const Tensor& ref = *in.ref;
  Elementwise w;
  const size_t n = ref.numel();
  w.err.reset(new double[n]);
  w.ref.reset(new double[n]);
  w.err2.reset(new double[n]);
  w.allow2.reset(new double[n]);
  w.used.reset(new uint8_t[n]);
  w.exact.reset(new uint8_t[n]);
  w.heads = ref.shape[0] * ref.shape[1];
  w.seq = ref.shape[2];
  w.width = ref.shape.size() > 3 ? ref.shape[3] : 1;
  if (in.row_dof && !in.row_dof->data.empty()) {
    if (in.row_dof->numel() != n / static_cast<size_t>(w.width)) throw std::invalid_argument("judge_tensor: row_dof is not one per row");
    w.row_dof = in.row_dof;
  }
  const size_t width = static_cast<size_t>(w.width);
  std::unique_ptr<double[]> base2(new double[n]);
  // Each element on its own, over threads (harness/parallel.h)...
  parallel_for(n, [&](size_t begin, size_t end) {
    for (size_t e = begin; e < end; ++e) {
      w.used[e] = 0;
      w.exact[e] = 0;
      w.err[e] = w.ref[e] = w.err2[e] = w.allow2[e] = base2[e] = 0.0;
      if (in.skip_rows && (*in.skip_rows)[e / width]) continue;
      const double r = ref.data[e], a = in.impl->data[e];
      if (!std::isfinite(r) || !std::isfinite(a)) continue;
      w.used[e] = 1;
      w.err[e] = a - r;
      w.ref[e] = r;
      w.err2[e] = (a - r) * (a - r);
      auto sq_err = [&](const Tensor* t) {
        if (!t) return 0.0;
        const double x = t->data[e];
        return std::isfinite(x) ? (x - r) * (x - r) : 0.0;
      };
      base2[e] = (sq_err(in.baseline_fwd) + sq_err(in.baseline_rev)) / 2.0;
    }
  });
  // ...and the sums over elements in element order, as one pass adds them.
  double sum_base2 = 0, sum_model2 = 0, used = 0;
  for (size_t e = 0; e < n; ++e) {
    if (!w.used[e]) continue;
    used += 1;
    sum_base2 += base2[e];
    if (in.sigma) sum_model2 += in.sigma->data[e] * in.sigma->data[e];
  }
  const double kappa = sum_model2 > 0 ? std::sqrt(sum_base2 / sum_model2) : 0.0;
  const double k = std::max(kappa, rule.kappa_min);
  parallel_for(n, [&](size_t begin, size_t end) {
    for (size_t e = begin; e < end; ++e) {
      if (!w.used[e]) continue;
      const double m = in.sigma ? in.sigma->data[e] : 0.0;
      const double allow = std::sqrt(std::max(k * k * m * m, base2[e])) + in.tiny;
      w.allow2[e] = allow * allow;
      w.exact[e] = m == 0 && base2[e] == 0;
    }
  });
  w.row_hash.assign(n / width, 0);
  parallel_for(w.row_hash.size(), width, [&](size_t row_begin, size_t row_end) {
    for (size_t row = row_begin; row < row_end; ++row) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a over the row's bits
      for (size_t d = 0; d < width; ++d) {
        uint64_t bits;
        const double r = ref.data[row * width + d];
        std::memcpy(&bits, &r, sizeof bits);
        h = (h ^ bits) * 1099511628211ull;
      }
      w.row_hash[row] = h;
    }
  });
  *kappa_out = kappa;
  *model_rms_out = used > 0 ? std::sqrt(sum_model2 / used) : 0.0;
  return w;
}

// Sums over a box [h][s0, s1)[d0, d1) of the flattened tensor. A row's c elements in the box
// carry min(c, the row's dof) independent errors: its shared sources reach every column.
// Exact elements carry none: counting them made a tile of one query's dV rows (8 keys seen,
// 8 not) read 198 independent errors where the 8 seen rows carried them all. A row that copies
// one already in the block carries none either (row_hash). For an enclosing block (the tensor
// around a head), `rows_for_outer` receives this box's rows that carry errors, in order, with
// their dof: judge_tensor counts them against the rows of the heads before, so the head and the
// tensor are summed in one pass.
struct BlockSum {
  double err2 = 0, allow2 = 0, n = 0, dof = 0;
};
struct RowDof {
  uint64_t hash;
  double dof;
};
BlockSum sum_box(const Elementwise& w, int64_t h, int64_t s0, int64_t s1, int64_t d0, int64_t d1,
                 std::vector<RowDof>* rows_for_outer = nullptr) {
  BlockSum b;
  std::unordered_set<uint64_t> seen;  // a one-row box (the row blocks) needs none
  for (int64_t s = s0; s < s1; ++s) {
    const size_t row = static_cast<size_t>(h * w.seq + s);
    double in_row = 0, can_err = 0;
    for (int64_t d = d0; d < d1; ++d) {
      const size_t e = row * static_cast<size_t>(w.width) + static_cast<size_t>(d);
      if (!w.used[e]) continue;
      b.err2 += w.err2[e];
      b.allow2 += w.allow2[e];
      in_row += 1;
      can_err += w.exact[e] ? 0 : 1;
    }
    b.n += in_row;
    if (can_err == 0) continue;
    const double dof = w.row_dof ? std::min(can_err, w.row_dof->data[row]) : can_err;
    if (s1 - s0 == 1 || seen.insert(w.row_hash[row]).second) b.dof += dof;
    if (rows_for_outer) rows_for_outer->push_back({w.row_hash[row], dof});
  }
  return b;
}

// A row's error along the row itself, z = sum_d err_d ref_d / sqrt(V): an error shaped like
// the output (a wrong normalizer or rescale, most real row bugs) adds up over the row's n
// elements instead of averaging, sqrt(n) times the RMS statistic's strength. V bounds the
// variance of the projection: sum_d sigma'_d^2 ref_d^2 for independent errors, and by
// Cauchy-Schwarz (sum_d sigma'_d^2)(sum_d ref_d^2) / dof when the row's errors come from dof
// shared sources (a part shared by the whole row, such as the normalizer, may lie along the
// row). And a floor: a scale error of the whole row of relative variance u_acc^2 L, from the
// fp32 quantities a row shares (its normalizer, a reciprocal, a rescale), whose rounding
// implementations arrange differently: torch.math's fp32 O and dK rows carry one several times
// the normalizer model's (12.9 and 13.4 against 12 without the floor). Below fp32 storage the
// floor is 2^-8 to 2^-26 of the storage rounding and the projection keeps its strength; in
// fp32 it leaves rows to the RMS statistic. One draw: a block of one dof, judged at limit(1).
BlockSum row_projection(const Elementwise& w, size_t row, double row_scale_variance) {
  double along = 0, independent = 0, allow2 = 0, ref2 = 0, can_err = 0;
  for (int64_t d = 0; d < w.width; ++d) {
    const size_t e = row * static_cast<size_t>(w.width) + static_cast<size_t>(d);
    if (!w.used[e] || w.exact[e]) continue;
    along += w.err[e] * w.ref[e];
    independent += w.allow2[e] * w.ref[e] * w.ref[e];
    allow2 += w.allow2[e];
    ref2 += w.ref[e] * w.ref[e];
    can_err += 1;
  }
  // Only where the reference stands above the errors a correct kernel may make: where a row
  // cancels to rounding noise (dQ of a constant V, exactly 0), the reference's direction is
  // that rounding's own, and errors lie along it (mutant_ok's fp32 dQ row, 12.1 against 12).
  if (can_err == 0 || allow2 >= ref2) return {};
  const double dof = std::max(1.0, w.row_dof ? std::min(can_err, w.row_dof->data[row]) : can_err);
  return {along * along, std::max(independent, allow2 * ref2 / dof) + row_scale_variance * ref2 * ref2, can_err, 1};
}

double ratio_of(const BlockSum& b) {
  if (b.err2 == 0) return 0.0;
  return b.allow2 > 0 ? std::sqrt(b.err2 / b.allow2) : std::numeric_limits<double>::infinity();
}

// What one head's blocks (its rows, tiles and the head itself) give the verdict: the same
// updates judge_tensor made block by block, kept per head so that heads run on threads and are
// merged in head order (judge_tensor).
struct HeadJudgement {
  bool pass = true;
  std::map<Granularity, double> margin;
  double worst_score = -1;
  WorstBlock worst;
  double max_err2 = -1, bound_max = 0;
  BlockSum head;
  std::vector<RowDof> head_rows;  // the head's rows that carry errors, for the tensor's dof
};

// What judge_head reads of one row: its block, its projection on itself and its largest error.
struct RowBlocks {
  BlockSum box, along;
  double max_err2 = -1, allow2_at_max = 0;
};

// The blocks of a tensor computed here, from its elements.
class ElementBlocks {
 public:
  ElementBlocks(const Elementwise& w, double row_scale_variance) : w_(w), row_scale_variance_(row_scale_variance) {}
  int64_t seq() const { return w_.seq; }
  int64_t width() const { return w_.width; }
  const Tensor* row_dof() const { return w_.row_dof; }
  RowBlocks row(int64_t h, int64_t s) const {
    RowBlocks r;
    const size_t row = static_cast<size_t>(h * w_.seq + s);
    for (int64_t d = 0; d < w_.width; ++d) {
      const size_t e = row * static_cast<size_t>(w_.width) + static_cast<size_t>(d);
      if (w_.used[e] && w_.err2[e] > r.max_err2) {
        r.max_err2 = w_.err2[e];
        r.allow2_at_max = w_.allow2[e];
      }
    }
    r.box = sum_box(w_, h, s, s + 1, 0, w_.width);
    if (w_.width > 1) r.along = row_projection(w_, row, row_scale_variance_);
    return r;
  }
  BlockSum tile(int64_t h, int64_t s0, int64_t s1, int64_t d0, int64_t d1) const { return sum_box(w_, h, s0, s1, d0, d1); }
  BlockSum head(int64_t h, std::vector<RowDof>* rows_for_outer) const { return sum_box(w_, h, 0, w_.seq, 0, w_.width, rows_for_outer); }

 private:
  const Elementwise& w_;
  double row_scale_variance_;
};

// The blocks of a tensor from a reducer's sums (VerdictSums): a row's and a tile's as they came,
// a head's summed over its rows in order, with sum_box's dof rule.
class ReducedBlocks {
 public:
  ReducedBlocks(const VerdictSums& sums, const Tensor& ref, const Tensor* row_dof, int64_t tile)
      : sums_(sums), row_dof_(row_dof), tile_(tile) {
    seq_ = ref.shape[2];
    width_ = ref.shape.size() > 3 ? ref.shape[3] : 1;
    row_tiles_ = (seq_ + tile - 1) / tile;
    col_tiles_ = (width_ + tile - 1) / tile;
  }
  int64_t seq() const { return seq_; }
  int64_t width() const { return width_; }
  const Tensor* row_dof() const { return row_dof_; }
  RowBlocks row(int64_t h, int64_t s) const {
    const size_t row = static_cast<size_t>(h * seq_ + s);
    const RowSums& r = sums_.rows[row];
    return {{r.err2, r.allow2, r.n, r.can_err == 0 ? 0.0 : dof_of(r, row)},
            {r.along_err2, r.along_allow2, r.along_n, r.along_dof},
            r.max_err2,
            r.allow2_at_max};
  }
  BlockSum tile(int64_t h, int64_t s0, int64_t, int64_t d0, int64_t) const {
    const TileSums& t = sums_.tiles[static_cast<size_t>((h * row_tiles_ + s0 / tile_) * col_tiles_ + d0 / tile_)];
    return {t.err2, t.allow2, t.n, t.dof};
  }
  BlockSum head(int64_t h, std::vector<RowDof>* rows_for_outer) const {
    BlockSum b;
    std::unordered_set<uint64_t> seen;
    for (int64_t s = 0; s < seq_; ++s) {
      const size_t row = static_cast<size_t>(h * seq_ + s);
      const RowSums& r = sums_.rows[row];
      b.err2 += r.err2;
      b.allow2 += r.allow2;
      b.n += r.n;
      if (r.can_err == 0) continue;
      const double dof = dof_of(r, row);
      if (seq_ == 1 || seen.insert(r.hash).second) b.dof += dof;
      if (rows_for_outer) rows_for_outer->push_back({r.hash, dof});
    }
    return b;
  }

 private:
  double dof_of(const RowSums& r, size_t row) const { return row_dof_ ? std::min(r.can_err, row_dof_->data[row]) : r.can_err; }
  const VerdictSums& sums_;
  const Tensor* row_dof_;
  int64_t tile_, seq_ = 1, width_ = 1, row_tiles_ = 1, col_tiles_ = 1;
};

// One head's blocks, in the order every pass over them takes: its elements (the largest error,
// and each element where a row is one), its rows, its tiles, the head.
template <class Blocks>
HeadJudgement judge_head(const Blocks& blocks, const ToleranceRule& rule, int64_t h, int64_t b_heads, const SharedAcrossRows* shared) {
  HeadJudgement j;
  auto head_name = [&] { return "b" + std::to_string(h / b_heads) + " h" + std::to_string(h % b_heads); };
  auto consider = [&](Granularity granularity, const BlockSum& b, const std::function<std::string()>& where) {
    if (b.n == 0) return;
    const double ratio = ratio_of(b), limit = rule.limit(std::max(1.0, b.dof));
    if (ratio > limit) j.pass = false;
    double& m = j.margin[granularity];
    m = std::max(m, ratio / limit);
    if (ratio / limit > j.worst_score) {
      j.worst_score = ratio / limit;
      j.worst = {granularity, where(), ratio, limit, b.n, b.dof};
    }
  };
  const int64_t seq = blocks.seq(), width = blocks.width(), tile = std::max<int64_t>(1, rule.tile);
  std::vector<RowBlocks> rows(static_cast<size_t>(seq));
  for (int64_t s = 0; s < seq; ++s) {
    const RowBlocks& r = rows[static_cast<size_t>(s)] = blocks.row(h, s);
    if (r.max_err2 > j.max_err2) {
      j.max_err2 = r.max_err2;
      const Tensor* row_dof = blocks.row_dof();
      j.bound_max = rule.limit(row_dof ? row_dof->data[static_cast<size_t>(h * seq + s)] : static_cast<double>(width)) *
                    std::sqrt(r.allow2_at_max);
    }
    // The finest block is a row: one element of a row is not judged alone (its error
    // and its sigma' are too noisy), except where a row is one element (LSE, D = 1).
    if (width == 1 && r.box.n > 0)
      consider(Granularity::element, {r.box.err2, r.box.allow2, 1, 1}, [&] { return head_name() + " s" + std::to_string(s); });
  }
  if (width > 1)
    for (int64_t s = 0; s < seq; ++s) {
      const RowBlocks& r = rows[static_cast<size_t>(s)];
      consider(Granularity::row, r.box, [&] { return head_name() + " s" + std::to_string(s); });
      consider(Granularity::row_along_itself, r.along, [&] { return head_name() + " s" + std::to_string(s); });
    }
  const bool shared_tiles = shared && shared->tile == tile;
  for (int64_t s0 = 0; s0 < seq; s0 += tile)
    for (int64_t d0 = 0; d0 < width; d0 += tile) {
      const int64_t s1 = std::min(seq, s0 + tile), d1 = std::min(width, d0 + tile);
      BlockSum box = blocks.tile(h, s0, s1, d0, d1);
      if (shared_tiles) {
        const size_t at = static_cast<size_t>((h * shared->row_tiles + s0 / tile) * shared->col_tiles + d0 / tile);
        box.dof = dof_with_shared_part(box.dof, shared->tile_share[at], shared->tile_sources[at]);
      }
      consider(Granularity::tile, box, [&] {
        return head_name() + " s" + std::to_string(s0) + "-" + std::to_string(s1 - 1) +
               (width > 1 ? " d" + std::to_string(d0) + "-" + std::to_string(d1 - 1) : "");
      });
    }
  j.head = blocks.head(h, &j.head_rows);
  if (shared) j.head.dof = dof_with_shared_part(j.head.dof, shared->head_share[static_cast<size_t>(h)], shared->head_sources[static_cast<size_t>(h)]);
  consider(Granularity::head, j.head, [&] { return head_name(); });
  return j;
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

// Every tensor is fingerprinted, passing or not (the consistency check compares passing ones),
// and a failing one gets its class (judge_tensor in verdict.h).
void fingerprint_and_class(TensorVerdict& v, const JudgeInput& in, const ToleranceRule& rule) {
  double rung_max = 0;  // the max error of the fingerprinted rung's emulation
  if (in.rungs) {
    std::vector<std::pair<Contract, double>> rungs;
    std::map<Contract, double> maxes;
    for (const auto& [k, e] : *in.rungs) {
      rungs.emplace_back(k, e.rms);
      maxes[k] = e.max_abs;
    }
    const double fp32_storage = unit_roundoff(DType::f32) * v.err.ref_rms / std::sqrt(3.0);
    rungs = floor_rungs(std::move(rungs), in.declared, rule.kappa_min * v.model_rms, fp32_storage);
    v.print = fingerprint(v.err.rms, rungs, rule.fingerprint_band);
    if (v.print.rung) rung_max = maxes[*v.print.rung];
    // Far beyond the coarsest contract the backend may hold and beyond the expected error is a
    // wrong result. (Beyond that rung alone is not: where every rung is near exact, through
    // cancellation, or the backend declares a coarser LSE, a tiny error looks coarser.)
    double held = rungs.empty() ? 0.0 : rungs.back().second;
    for (const auto& [k, e] : rungs)
      if (k == in.coarsest_held) held = e;
    if (held > 0 && v.err.rms > rule.fingerprint_band * held && v.tensor_ratio > 1.0) v.pass = false;
  }
  if (v.pass) return;
  if (v.err.nonfinite_mismatch)
    v.failure = FindingClass::nan_inf;
  else if (v.print.rung && operand_mantissa_bits(*v.print.rung) < operand_mantissa_bits(in.declared) &&
           v.err.max_abs <= rule.fingerprint_band * rung_max)
    // Coarser rounding spreads its error like the coarser rung does, in RMS and in max;
    // a localized bug (one row, one tile) with a similar RMS has a far larger max.
    v.failure = FindingClass::contract_violation;
  else
    v.failure = FindingClass::mismatch;
}

}  // namespace

// A NaN or Inf is the type's range, not the backend's fault, where the naive computation under
// the declared contract makes one at the same element, or anywhere when the case's gradient
// intermediates may leave the type's range (intermediates_overflow: dP = dO V^T past fp16's
// 65504, which an unfused graph stores in fp16 and inf - inf turns into NaN downstream). Those
// elements move from nonfinite_mismatch to nonfinite_under_contract (the run notes them); they
// are already out of the blocks, as every non-finite element is.
void excuse_nonfinite_under_contract(const JudgeInput& in, ErrorStats& err) {
  if (!in.baseline_fwd && !in.baseline_rev && !in.intermediates_overflow) return;
  const Tensor& ref = *in.ref;
  const size_t row = ref.shape.size() > 3 ? static_cast<size_t>(ref.shape.back()) : 1;
  auto finite_at = [](const Tensor* t, size_t e) { return !t || std::isfinite(t->data[e]); };
  size_t excused = 0;
  for (size_t e = 0; e < ref.numel(); ++e) {
    if (in.skip_rows && (*in.skip_rows)[e / row]) continue;
    const double a = in.impl->data[e], r = ref.data[e];
    if (std::isfinite(r) && std::isfinite(a)) continue;
    if ((std::isinf(r) && a == r) || overflow_stored(a, r, in.overflow)) continue;
    if (in.intermediates_overflow || !finite_at(in.baseline_fwd, e) || !finite_at(in.baseline_rev, e)) ++excused;
  }
  err.nonfinite_mismatch -= excused;
  err.nonfinite_under_contract = excused;
}

namespace {

// The baselines' error: the larger of the two orders' (one where only one ran).
ErrorStats baseline_error(const std::optional<ErrorStats>& fwd, const std::optional<ErrorStats>& rev) {
  ErrorStats b;
  if (fwd) b = *fwd;
  if (rev) {
    b.rms = std::max(b.rms, rev->rms);
    b.max_abs = std::max(b.max_abs, rev->max_abs);
    b.rel_fro = std::max(b.rel_fro, rev->rel_fro);
  }
  return b;
}

// Each head's blocks on their own (over threads at real size), then merged in head order: the
// pass, each granularity's largest margin, the first block of the largest score and the first
// element of the largest error, as one pass over the heads in order finds them; then the
// tensor's block, the fingerprint and the class.
template <class Blocks>
void judge_blocks(TensorVerdict& v, const Blocks& blocks, const JudgeInput& in, const ToleranceRule& rule) {
  const int64_t b_heads = in.ref->shape[1], seq = blocks.seq(), width = blocks.width();
  std::vector<HeadJudgement> heads(static_cast<size_t>(in.ref->shape[0] * b_heads));
  const SharedAcrossRows* shared = in.shared && !in.shared->empty() && in.shared->head_share.size() == heads.size() ? in.shared : nullptr;
  parallel_for(heads.size(), static_cast<size_t>(seq * width), [&](size_t begin, size_t end) {
    for (size_t h = begin; h < end; ++h) heads[h] = judge_head(blocks, rule, static_cast<int64_t>(h), b_heads, shared);
  });
  double worst_score = -1, max_err2 = -1;
  BlockSum all;
  std::unordered_set<uint64_t> tensor_rows;  // rows copied across heads count once in the tensor
  for (const HeadJudgement& j : heads) {
    if (!j.pass) v.pass = false;
    for (const auto& [granularity, x] : j.margin) {
      double& m = v.margin[granularity];
      m = std::max(m, x);
    }
    if (j.worst_score > worst_score) {
      worst_score = j.worst_score;
      v.worst = j.worst;
    }
    if (j.max_err2 > max_err2) {
      max_err2 = j.max_err2;
      v.bound_max = j.bound_max;
    }
    double dof_in_outer = 0;
    for (const RowDof& r : j.head_rows)
      if (tensor_rows.insert(r.hash).second) dof_in_outer += r.dof;
    all.err2 += j.head.err2;
    all.allow2 += j.head.allow2;
    all.n += j.head.n;
    all.dof += dof_in_outer;
  }
  if (shared) all.dof = dof_with_shared_part(all.dof, shared->tensor_share, shared->tensor_sources);
  if (all.n > 0) {
    const double ratio = ratio_of(all), limit = rule.limit(std::max(1.0, all.dof));
    if (ratio > limit) v.pass = false;
    double& m = v.margin[Granularity::tensor];
    m = std::max(m, ratio / limit);
    if (ratio / limit > worst_score) v.worst = {Granularity::tensor, "all", ratio, limit, all.n, all.dof};
  }
  v.tensor_ratio = all.n > 0 ? ratio_of(all) : 0.0;
  v.bound_rms = all.n > 0 ? rule.limit(std::max(1.0, all.dof)) * std::sqrt(all.allow2 / all.n) : 0.0;
  if (v.err.nonfinite_mismatch) v.pass = false;
  fingerprint_and_class(v, in, rule);
}

}  // namespace

TensorVerdict judge_tensor(TensorId tensor, const JudgeInput& in, const ToleranceRule& rule, VerdictReducer* reducer) {
  TensorVerdict v;
  v.tensor = tensor;
  if (reducer)
    if (std::optional<VerdictSums> sums = reducer->sums(in, rule)) {
      v.err = sums->err;
      v.baseline = baseline_error(sums->baseline_fwd, sums->baseline_rev);
      v.kappa = sums->kappa;
      v.model_rms = sums->model_rms;
      const Tensor* row_dof = in.row_dof && !in.row_dof->data.empty() ? in.row_dof : nullptr;
      judge_blocks(v, ReducedBlocks(*sums, *in.ref, row_dof, std::max<int64_t>(1, rule.tile)), in, rule);
      return v;
    }
  // The three comparisons are independent sums (each in its own order): at real size, at once.
  std::optional<ErrorStats> base_fwd, base_rev;
  parallel_tasks(3, in.ref->numel() >= parallel_min_elements(), [&](size_t task) {
    if (task == 0) v.err = compare(*in.impl, *in.ref, in.skip_rows, in.overflow);
    if (task == 1 && in.baseline_fwd) base_fwd = compare(*in.baseline_fwd, *in.ref, in.skip_rows, in.overflow);
    if (task == 2 && in.baseline_rev) base_rev = compare(*in.baseline_rev, *in.ref, in.skip_rows, in.overflow);
  });
  if (v.err.nonfinite_mismatch) excuse_nonfinite_under_contract(in, v.err);
  v.baseline = baseline_error(base_fwd, base_rev);
  const Elementwise w = elementwise(in, rule, &v.kappa, &v.model_rms);
  judge_blocks(v, ElementBlocks(w, in.row_scale_variance), in, rule);
  return v;
}

std::map<FindingMetric, double> failure_metrics(const TensorVerdict& v) {
  using M = FindingMetric;
  return {{M::rms, v.err.rms},           {M::max_abs, v.err.max_abs},        {M::bound_rms, v.bound_rms},
          {M::bound_max, v.bound_max},   {M::baseline_rms, v.baseline.rms},  {M::baseline_max, v.baseline.max_abs},
          {M::worst_ratio, v.worst.ratio}, {M::worst_limit, v.worst.limit}, {M::kappa, v.kappa}};
}

std::string failure_detail(const TensorVerdict& v, Contract declared) {
  const WorstBlock& w = v.worst;
  const std::string where = std::string(w.granularity_name()) + " " + w.where + ": " + sci(w.ratio) + " sigma' (limit " +
                            sci(w.limit) + (w.dof < w.n ? " at " + sci(w.dof) + " independent errors of " + sci(w.n) : "") + ")";
  switch (v.failure.value_or(FindingClass::mismatch)) {
    case FindingClass::nan_inf:
      return std::to_string(v.err.nonfinite_mismatch) + " NaN/Inf elements where the reference is finite";
    case FindingClass::contract_violation:
      return "declares " + std::string(to_string(declared)) + ", computes like " + v.print.name() + " (rms " + sci(v.err.rms) +
             ", bound " + sci(v.bound_rms) + "; " + where + ")";
    default:
      return "rms " + sci(v.err.rms) + " (bound " + sci(v.bound_rms) + "), max " + sci(v.err.max_abs) + "; worst " + where +
             "; fingerprint " + v.print.name();
  }
}

}  // namespace attnfuzz
