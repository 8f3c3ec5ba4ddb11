#pragma once
// The tolerance rule, in one place (DESIGN.md, "Tolerance"). Every verdict prints it.
//
//   pass  iff  rms(impl) <= c_rms * rms(baseline) + floor_units * (u * rms(M) + u32 * rms(Ms) + tiny)
//         and  max(impl) <= c_max * max(baseline) + floor_units * (u * max(M) + u32 * max(Ms) + tiny)
//
// err(x) is x's error against the float64 reference (rms: root mean square over
// elements; max: largest absolute), baseline the worse of two naive computations
// under the backend's declared contract with opposite accumulation orders
// (oracles/emulated.h), u the unit roundoff of the tensor's storage type (fp32 for
// LSE), M the magnitude of the terms behind each element (absolute values propagated
// through the formulas: where a gradient cancels to ~0 its rounding error does not),
// Ms the same with each probability weighted by 1 + |S| (an error of u32 |S| in a score
// moves P by that much: large logits), u32 = 2^-24 the accumulation precision,
// tiny the storage type's smallest subnormal. For O, dQ, dK, dV, u is multiplied by
// sqrt(n), n the length of the reduction behind the element (Skv for O and dQ, Sq times
// the group for dK and dV): rounding errors of a sum grow like sqrt(n) u. For LSE, M = max(1, |LSE|) and u is the
// backend's declared LSE accuracy. The RMS test is the statistical one; the max test, looser, catches
// localized errors (one row, one tile) that barely move the RMS.
#include <string>

namespace attnfuzz {

struct ToleranceRule {
  double c_rms = 4.0;
  double c_max = 10.0;
  double floor_units = 4.0;
  // A failing tensor is a contract violation (rather than a plain mismatch) when its
  // error sits within this factor of a coarser contract's emulated error.
  double fingerprint_band = 8.0;
  std::string describe() const;
};

inline std::string ToleranceRule::describe() const {
  return "rms <= " + std::to_string(c_rms).substr(0, 4) + "*rms(baseline) + " + std::to_string(floor_units).substr(0, 4) +
         "*(u*rms(M)+u32*rms(Ms)+tiny); max <= " + std::to_string(c_max).substr(0, 5) + "*max(baseline) + " +
         std::to_string(floor_units).substr(0, 4) + "*(u*max(M)+u32*max(Ms)+tiny)";
}

}  // namespace attnfuzz
