#pragma once
// The tolerance rule, in one place (docs/semantics.md, "Tolerance"; docs/verdicts.md derives it).
// Every verdict prints it.
//
// For each output tensor X (O, LSE, dQ, dK, dV) and each element e, the expected rounding
// error of a correct implementation under the declared contract is
//
//     sigma'_e = max( max(kappa, kappa_min) * sigma_e, sqrt((b1_e^2 + b2_e^2) / 2) ) + tiny
//
//   sigma_e   the error model (harness/error_model.h): where rounding really happens,
//             per element (storage of P, dS and the outputs; accumulation; score errors),
//             independent errors added as a root-sum-square;
//   b1, b2    the errors of the two baselines: the same problem, through the same
//             composition, computed naively under the declared contract in opposite
//             accumulation orders (oracles/emulated.h);
//   kappa     sqrt(sum (b1^2 + b2^2) / 2 / sum sigma^2): the model's scale, calibrated on
//             the baselines, so the model only distributes the baselines' error over the
//             elements (a model that over- or under-predicts by a constant does not matter);
//   kappa_min keeps a floor where the baselines happen to be exact (ties, exact sums);
//   tiny      the storage type's smallest subnormal.
//
// A tensor passes when, for every block at every granularity (one row of D, or one element
// where a row is one element (LSE); one tile of `tile` rows x `tile` columns; one head; the
// whole tensor),
//
//     sqrt( sum_block err_e^2 / sum_block sigma'_e^2 )  <=  c * (1 + k / sqrt(dof))
//     dof = sum over the block's rows of min(the row's elements in the block, the row's dof)
//
// err_e being the element's error against the float64 reference, and a row's dof the number
// of independent errors it carries (harness/error_model.h, model_row_dof: the elements of a
// row share its reduction's terms, so one dominant rounded term moves the whole row). The
// whole-tensor block is the statistical test (like FlashAttention's "2x the baseline's
// error"); the smaller blocks catch errors confined to one row, tile or head that a global
// statistic dilutes; k / sqrt(dof) widens the limit for blocks whose statistic averages few
// independent errors, and so fluctuates more.
// A `coarser` fingerprint (an error 8x beyond the coarsest contract's, that rung's error taken
// as at least kappa_min times the error model's RMS: one emulation is one sample, and can be
// lucky) with a whole-tensor error beyond sigma' never passes.
#include <cmath>
#include <cstdint>
#include <string>

namespace attnfuzz {

struct ToleranceRule {
  double c = 3.0;
  double k = 3.0;
  double kappa_min = 0.5;
  int64_t tile = 16;
  // A failing tensor is a contract violation (rather than a plain mismatch) when its
  // error sits within this factor of a coarser contract's emulated error; an error this
  // factor beyond the coarsest rung is `coarser`, a wrong result.
  double fingerprint_band = 8.0;

  // The limit on a block of `dof` independent errors.
  double limit(double dof) const { return c * (1.0 + k / std::sqrt(std::max(1.0, dof))); }
  std::string describe() const;
};

inline std::string ToleranceRule::describe() const {
  auto num = [](double x) {
    std::string s = std::to_string(x);
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  return "every block (row, or element of LSE; " + std::to_string(tile) + "x" + std::to_string(tile) +
         " tile, head, tensor) of dof independent errors: sqrt(sum err^2 / sum sigma'^2) <= " + num(c) + "*(1 + " + num(k) +
         "/sqrt(dof)); sigma' = max(max(kappa, " + num(kappa_min) +
         ") sigma_model, rms of the baselines' errors); kappa = model scale fitted on the baselines";
}

}  // namespace attnfuzz
