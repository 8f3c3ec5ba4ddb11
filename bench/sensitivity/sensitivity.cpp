#include "bench/sensitivity/sensitivity.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>

#include "harness/compose.h"
#include "harness/dtype.h"

namespace attnfuzz {

const char* to_string(Plant p) {
  switch (p) {
    case Plant::scale:
      return "scale";
    case Plant::noise:
      return "noise";
    case Plant::row:
      return "row";
    case Plant::tile:
      return "tile";
    case Plant::head:
      return "head";
    case Plant::lse_shift:
      return "lse_shift";
    case Plant::dlse:
      return "dlse";
    case Plant::softmax_scale:
      return "softmax_scale";
    case Plant::bias_scale:
      return "bias_scale";
  }
  return "?";
}

std::vector<Plant> plants_for(TensorId t) {
  std::vector<Plant> p{Plant::scale, Plant::noise, Plant::row, Plant::tile, Plant::head};
  if (t == TensorId::LSE) p.push_back(Plant::lse_shift);
  return p;
}

Case sensitivity_case(const SensitivityConfig& cfg) {
  Case c;
  c.seed = cfg.seed;
  const int64_t seq_q = cfg.seq_q > 0 ? cfg.seq_q : cfg.seq;
  c.shape = {1, cfg.heads * cfg.group, cfg.heads, seq_q, cfg.seq, cfg.dim, cfg.dim};
  c.dtype = cfg.dtype;
  c.mask = cfg.causal ? MaskExpr::causal_mask(Align::bottom_right) : MaskExpr{};
  c.d_lse = ValueDist{};  // normal: the dLSE plant needs a dLSE term
  if (cfg.outliers > 0) c.q = c.k = c.v = ValueDist{ValueDist::Kind::outliers, 0.0, 1.0, 0.05, cfg.outliers};
  const ValueDist constant{ValueDist::Kind::near_constant, 0.1, 0.0};
  if (cfg.tied.find('k') != std::string::npos) c.k = constant;
  if (cfg.tied.find('v') != std::string::npos) c.v = constant;
  if (cfg.near_constant_v > 0) c.v = ValueDist{ValueDist::Kind::near_constant, 0.1, cfg.near_constant_v};
  if (cfg.shifted > 0) {
    c.q = ValueDist{ValueDist::Kind::row_shift, 0.0, 1.0, 0.5, -cfg.shifted};
    c.k = ValueDist{ValueDist::Kind::row_shift, 0.0, 1.0, 1.0, cfg.shifted};
  }
  c.bias = cfg.bias;
  if (cfg.ragged) {
    c.shape.batch = 2;
    c.ragged = Ragged{};
    c.ragged->lens_q = cfg.seq_q > 0 ? std::vector<int64_t>{seq_q, std::min(seq_q, seq_q / 2 + 1)}
                                     : std::vector<int64_t>{cfg.seq - cfg.seq / 4, cfg.seq / 2 + 1};
    c.ragged->lens_kv = {cfg.seq - cfg.seq / 8, cfg.seq};
    c.ragged->page_size = cfg.page_size;
  }
  return c;
}

namespace {

Tensor& output_of(ComposedResult& r, TensorId t) {
  switch (t) {
    case TensorId::O:
      return r.fwd.o;
    case TensorId::LSE:
      return r.fwd.lse;
    case TensorId::dQ:
      return r.grads.dq;
    case TensorId::dK:
      return r.grads.dk;
    case TensorId::dV:
      return r.grads.dv;
    case TensorId::dBias:
      return r.grads.dbias;
    default:
      break;
  }
  throw std::logic_error("output_of");
}
const Tensor& output_of(const ComposedResult& r, TensorId t) { return output_of(const_cast<ComposedResult&>(r), t); }

// What a kernel would store: the output's storage type.
double stored(TensorId t, DType d, double x) { return t == TensorId::LSE ? static_cast<double>(static_cast<float>(x)) : round_to(d, x); }

// Applies an output-confined plant of size delta to tensor t (a copy of r).
ComposedResult planted(const ComposedResult& r, TensorId t, Plant plant, double delta, DType dtype, int64_t tile) {
  ComposedResult out = r;
  Tensor& x = output_of(out, t);
  const int64_t heads = x.shape[1], seq = x.shape[2], width = x.shape.size() > 3 ? x.shape[3] : 1;
  const int64_t last_head = heads - 1, mid = seq / 2, tile_start = (mid / tile) * tile;
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> normal;
  for (int64_t b = 0; b < x.shape[0]; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t d = 0; d < width; ++d) {
          double& v = x.at(b, h, s)[d];
          if (!std::isfinite(v)) continue;
          bool inside = false;
          switch (plant) {
            case Plant::scale:
              inside = true;
              break;
            case Plant::noise:
              v = stored(t, dtype, v * (1.0 + delta * normal(rng)));
              continue;
            case Plant::row:
              inside = b == 0 && h == last_head && s == mid;
              break;
            case Plant::tile:
              inside = b == 0 && h == last_head && s >= tile_start && s < tile_start + tile && d < tile;
              break;
            case Plant::head:
              inside = b == 0 && h == last_head;
              break;
            case Plant::lse_shift:
              v = stored(t, dtype, v + delta);
              continue;
            default:
              throw std::invalid_argument("planted: not an output plant");
          }
          if (inside) v = stored(t, dtype, v * (1.0 + delta));
        }
  return out;
}

// grads(delta) = grads - delta * (grads - grads without dLSE): the dLSE term scaled by 1 - delta.
ComposedResult dlse_scaled(const ComposedResult& full, const ComposedResult& no_dlse, double delta, DType dtype) {
  ComposedResult out = full;
  for (TensorId t : {TensorId::dQ, TensorId::dK, TensorId::dV, TensorId::dBias}) {
    Tensor& x = output_of(out, t);
    const Tensor& z = output_of(no_dlse, t);
    for (size_t e = 0; e < x.numel(); ++e) x.data[e] = stored(t, dtype, x.data[e] - delta * (x.data[e] - z.data[e]));
  }
  return out;
}

// ||a - b|| / ||b|| over the finite elements of both.
double relative_change(const Tensor& a, const Tensor& b) {
  double diff2 = 0, norm2 = 0;
  for (size_t e = 0; e < b.numel(); ++e) {
    if (!std::isfinite(a.data[e]) || !std::isfinite(b.data[e])) continue;
    diff2 += (a.data[e] - b.data[e]) * (a.data[e] - b.data[e]);
    norm2 += b.data[e] * b.data[e];
  }
  return norm2 > 0 ? std::sqrt(diff2 / norm2) : 0.0;
}

bool flagged(const BackendRun& run, const std::vector<Finding>& findings, const std::string& tensor) {
  if (tensor == "any") return !findings.empty();
  for (const auto& t : run.tensors)
    if (name_of(t.tensor) == tensor && t.compared && !t.pass) return true;
  return false;
}

// The smallest delta in [lo, cap] that `is_flagged` accepts, by doubling then bisecting in
// log space to a resolution of 2^(1/16); 0 when even `cap` is not flagged.
template <class F>
double smallest_flagged(double lo, double cap, F&& is_flagged) {
  if (is_flagged(lo)) return lo;
  double hi = lo * 2;
  while (!is_flagged(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > cap) return 0;
  }
  for (int i = 0; i < 4; ++i) {
    const double mid = std::sqrt(lo * hi);
    (is_flagged(mid) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

std::vector<SensitivityPoint> measure_sensitivity(const SensitivityConfig& cfg, Backend& correct, const OracleSet& oracles,
                                                  const ToleranceRule& rule) {
  const Case c = sensitivity_case(cfg);
  DiffOptions opt;
  opt.include_single = true;
  opt.check_determinism = false;
  opt.rule = rule;
  DifferentialSession session(c, oracles, opt);
  const Composition single{};
  const ComposedResult r0 = run_composition(correct, c, session.inputs(), single);
  std::vector<Finding> findings;
  const BackendRun base = session.judge(correct, single, r0, &findings);
  const bool passes = findings.empty();

  std::vector<SensitivityPoint> points;
  for (TensorId t : kOutputs) {
    if (!case_has_output(c, t)) continue;
    const TensorVerdict* v0 = nullptr;
    for (const auto& tv : base.tensors)
      if (tv.tensor == t) v0 = &tv;
    for (Plant plant : plants_for(t)) {
      SensitivityPoint pt;
      pt.tensor = to_string(t);
      pt.plant = plant;
      pt.correct_passes = v0 && v0->pass;
      pt.natural = plant == Plant::lse_shift ? v0->err.rms : v0->err.rel_fro;
      const double lo = std::max(pt.natural / 8, 1e-9);
      pt.threshold = smallest_flagged(lo, 64.0, [&](double delta) {
        const ComposedResult r = planted(r0, t, plant, delta, cfg.dtype, rule.tile);
        const BackendRun run = session.judge(correct, single, r, &findings);
        return flagged(run, findings, pt.tensor);
      });
      pt.planted = pt.threshold;
      points.push_back(pt);
    }
  }

  // Plants in the computation, flagged through any output. The search starts below the
  // smallest natural relative error of any output.
  std::map<TensorId, double> natural;
  double least_natural = 1.0;
  for (TensorId t : kOutputs)
    for (const auto& tv : base.tensors)
      if (tv.tensor == t && tv.compared && tv.err.rel_fro > 0) {
        natural[t] = tv.err.rel_fro;
        least_natural = std::min(least_natural, tv.err.rel_fro);
      }
  // The planted error in natural units: the output the planted run moves most, relative to
  // its own norm, against that output's natural error.
  auto planted_error = [&](SensitivityPoint& pt, const ComposedResult& at_threshold) {
    for (const auto& [t, nat] : natural) {
      const double moved = relative_change(output_of(at_threshold, t), output_of(r0, t));
      if (pt.natural == 0 || moved / nat > pt.planted / pt.natural) {
        pt.natural = nat;
        pt.planted = moved;
        pt.moved = to_string(t);
      }
    }
  };
  {
    Inputs no_dlse = session.inputs();
    for (double& x : no_dlse.d_lse.data) x = 0;
    const ComposedResult r_g0 = run_composition(correct, c, no_dlse, single);
    SensitivityPoint pt{"any", Plant::dlse};
    pt.correct_passes = passes;
    pt.threshold = smallest_flagged(std::max(least_natural / 8, 1e-9), 1.0, [&](double delta) {
      const BackendRun run = session.judge(correct, single, dlse_scaled(r0, r_g0, delta, cfg.dtype), &findings);
      return flagged(run, findings, "any");
    });
    if (pt.threshold > 0) planted_error(pt, dlse_scaled(r0, r_g0, pt.threshold, cfg.dtype));
    points.push_back(pt);
  }
  {
    SensitivityPoint pt{"any", Plant::softmax_scale};
    pt.correct_passes = passes;
    auto with_scale_off = [&](double delta) {
      Case off = c;
      off.scale = c.effective_scale() * (1.0 + delta);
      return run_composition(correct, off, session.inputs(), single);
    };
    pt.threshold = smallest_flagged(std::max(least_natural / 8, 1e-9), 4.0, [&](double delta) {
      const BackendRun run = session.judge(correct, single, with_scale_off(delta), &findings);
      return flagged(run, findings, "any");
    });
    if (pt.threshold > 0) planted_error(pt, with_scale_off(pt.threshold));
    points.push_back(pt);
  }
  if (c.bias) {
    SensitivityPoint pt{"any", Plant::bias_scale};
    pt.correct_passes = passes;
    auto with_bias_off = [&](double delta) {
      Inputs off = session.inputs();
      for (double& x : off.bias.data) x *= 1.0 + delta;
      return run_composition(correct, c, off, single);
    };
    pt.threshold = smallest_flagged(std::max(least_natural / 8, 1e-9), 4.0, [&](double delta) {
      const BackendRun run = session.judge(correct, single, with_bias_off(delta), &findings);
      return flagged(run, findings, "any");
    });
    if (pt.threshold > 0) planted_error(pt, with_bias_off(pt.threshold));
    points.push_back(pt);
  }
  return points;
}

}  // namespace attnfuzz
