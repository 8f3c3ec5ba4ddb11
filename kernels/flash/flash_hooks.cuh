#pragma once
// The places where a planted-bug build of the GPU mutant zoo changes one thing
// (tests/mutants/flash_planted.cuh, docs/kernels.md "The GPU mutant zoo"). The kernels call
// Planted::<hook>; here every hook is the correct code, inlined and folded away. A planted-bug
// build (ATTNFUZZ_FLASH_PLANTED_BUILD, set only by tests/mutants/CMakeLists.txt, which also puts
// tests/ on the include path) gets PlantedBug, NoPlantedBug with one hook replaced.
#include <cstdint>

#ifndef ATTNFUZZ_FLASH_PLANTED_BUILD
#define ATTNFUZZ_FLASH_PLANTED_BUILD 0
#endif

namespace attnfuzz::flash {

struct NoPlantedBug {
  // The backward's D' of one query row: rowsum(dO o O) - dLSE.
  __device__ static __forceinline__ float delta(float rowsum_do_o, float d_lse) { return rowsum_do_o - d_lse; }
  // How many head-dim columns rowsum(dO o O) runs over, of kD.
  template <int kD>
  __device__ static constexpr int delta_columns() {
    return kD;
  }
  // Whether row `row` of a partial tile with `rows` valid rows is copied to shared memory
  // (otherwise it is zeroed).
  __device__ static __forceinline__ bool row_copied(int64_t row, int64_t rows) { return row < rows; }
  // A sliding window's left edge: key j is visible to query i when
  // j - i - diagonal >= -left + window_edge.
  static constexpr int64_t window_edge = 0;
  // The factor e^(unit (m - m')) the forward rescales O by after key tile n (its first key
  // `first_key`); the row sum always uses the true one.
  __device__ static __forceinline__ float o_rescale(float correction, int64_t first_key) {
    (void)first_key;
    return correction;
  }
  // The dK/dV kernel: the mask unit column of warpgroup `wg` in key tile `n_block`.
  __device__ static __forceinline__ int64_t dkdv_unit_column(int64_t n_block, int units_per_tile, int wg) {
    return n_block * units_per_tile + wg;
  }
};

}  // namespace attnfuzz::flash

#if ATTNFUZZ_FLASH_PLANTED_BUILD
#include "mutants/flash_planted.cuh"  // defines attnfuzz::flash::PlantedBug for ATTNFUZZ_FLASH_MUTANT
namespace attnfuzz::flash {
using Planted = PlantedBug;
}
#else
namespace attnfuzz::flash {
using Planted = NoPlantedBug;
}
#endif
