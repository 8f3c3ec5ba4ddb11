#pragma once
// The verdict's sums over elements on the GPU (oracles/gpu_verdict.cu), behind a plain C++
// interface: oracles/gpu_oracles.cpp turns them into harness/verdict.h's VerdictReducer.
//
// A judged tensor is rows of `width` elements ([B][H][S][D], or [B][H][S] with width 1), heads
// of `seq` rows. Per element, with r the reference, a the implementation, b1 and b2 the
// baselines, m the error model's sigma (harness/tolerance.h):
//
//   used     the row is judged and a and r are finite
//   err      a - r,  err2 = err^2
//   base2    ((b1 - r)^2 + (b2 - r)^2) / 2, a non-finite baseline's term 0
//   allow2   (sqrt(max(k^2 m^2, base2)) + tiny)^2,  k = max(kappa, kappa_min)
//   exact    m = 0 and base2 = 0: no rounded term reaches the element
//
// totals():  per row, then over rows: compare()'s sums for a, b1 and b2 against r
//            (harness/metrics.h), and sum base2, sum m^2 and the used count, for kappa;
// blocks():  per row: its block (sum err2, sum allow2, used, not exact), its projection on
//            itself (harness/verdict.cpp, row_projection), its first largest err2 with its
//            allow2, and the FNV-1a hash of r's bits; per tile of tile x tile elements: its
//            sums and its dof (copies of a row, by hash, count once).
// A row's and a tile's sums run over their elements in order, one thread each, as the host's
// do; the totals over rows run in a fixed order too, so the same inputs give the same bits.
// The file is compiled without contracting multiplies and adds into FMAs, so that every
// element's terms round as the host's.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "oracles/device_mirror.h"

namespace attnfuzz::gpu {

// The tensors are device copies (oracles/device_mirror.h): float64 elements, or one byte per
// row (the rows left out).

struct VerdictShape {
  int64_t rows = 0, width = 1, seq = 1;  // heads = rows / seq
};

// What one judged tensor's sums read; null where absent (no baseline, no model, every row
// judged, every row's dof its width).
struct VerdictArrays {
  const DeviceCopy *impl = nullptr, *ref = nullptr, *baseline_fwd = nullptr, *baseline_rev = nullptr, *sigma = nullptr;
  const DeviceCopy *row_dof = nullptr, *skip_rows = nullptr;
  double tiny = 0, overflow = 0;
};

// compare()'s sums of one tensor against the reference.
struct CompareSums {
  double diff2 = 0, ref2 = 0, sum_abs = 0, finite = 0, max_abs = 0, ref_max_abs = 0, nonfinite_mismatch = 0;
};
struct VerdictTotals {
  CompareSums impl, baseline_fwd, baseline_rev;
  double base2 = 0, model2 = 0, used = 0;
};
VerdictTotals totals(const VerdictArrays& a, const VerdictShape& s);
CompareSums compare(const DeviceCopy& a, const DeviceCopy& ref, const DeviceCopy* skip_rows, const VerdictShape& s, double overflow);

// The largest tile edge blocks() takes.
inline constexpr int64_t kMaxTileRows = 64;
// Per row, 10 doubles in this order: err2, allow2, n, can_err, along_err2, along_allow2,
// along_n, along_dof, max_err2, allow2_at_max; and its hash. Per tile ([head][row tile]
// [column tile]): err2, allow2, n, dof.
inline constexpr int kRowFields = 10, kTileFields = 4;
struct VerdictBlocks {
  std::vector<double> rows;  // [rows][kRowFields]
  std::vector<uint64_t> hashes;
  std::vector<double> tiles;  // [tiles][kTileFields]
};
VerdictBlocks blocks(const VerdictArrays& a, const VerdictShape& s, double k, double row_scale_variance, int64_t tile);

}  // namespace attnfuzz::gpu
