#pragma once
// The planted bugs of the GPU mutant zoo: cuda.flash with one hook of NoPlantedBug
// (kernels/flash/flash_hooks.cuh) replaced, selected by ATTNFUZZ_FLASH_MUTANT (the index in
// tests/mutants/CMakeLists.txt's GPU list). The first three fire at any size; the last three
// only where small cases never go (docs/kernels.md, "The GPU mutant zoo").
//   0 flash_ok               none: the control, which must give no finding
//   1 flash_dlse_dropped     the backward ignores dLSE (D' = rowsum(dO O), no - dLSE)
//   2 flash_tile_boundary    a partial tile of fewer than 64 rows loses its last valid row
//   3 flash_window_edge      a sliding window's left edge moves in by one key
//   4 flash_tail_rescale     the forward stops rescaling O once it passes key 1024: a row
//                            whose maximum grows there keeps O's old weights (Skv > 1024)
//   5 flash_delta_first_atom D' sums dO o O over the first 64 head-dim columns only, a loop
//                            bound of one swizzle atom (head dims of 128)
//   6 flash_second_tile_row  from the second 128-key tile on, the dK/dV kernel's second
//                            warpgroup reads the mask unit of the first: on the diagonal a
//                            partial unit is taken as full (a mask, Skv > 128)
#include <cstdint>

#ifndef ATTNFUZZ_FLASH_MUTANT
#error "a planted-bug build needs ATTNFUZZ_FLASH_MUTANT"
#endif

namespace attnfuzz::flash {

#if ATTNFUZZ_FLASH_MUTANT == 0
struct PlantedBug : NoPlantedBug {};
#elif ATTNFUZZ_FLASH_MUTANT == 1
struct PlantedBug : NoPlantedBug {
  __device__ static __forceinline__ float delta(float rowsum_do_o, float) { return rowsum_do_o; }
};
#elif ATTNFUZZ_FLASH_MUTANT == 2
struct PlantedBug : NoPlantedBug {
  __device__ static __forceinline__ bool row_copied(int64_t row, int64_t rows) { return row < rows - (rows < 64 ? 1 : 0); }
};
#elif ATTNFUZZ_FLASH_MUTANT == 3
struct PlantedBug : NoPlantedBug {
  static constexpr int64_t window_edge = 1;
};
#elif ATTNFUZZ_FLASH_MUTANT == 4
struct PlantedBug : NoPlantedBug {
  __device__ static __forceinline__ float o_rescale(float correction, int64_t first_key) { return first_key >= 1024 ? 1.f : correction; }
};
#elif ATTNFUZZ_FLASH_MUTANT == 5
struct PlantedBug : NoPlantedBug {
  template <int kD>
  __device__ static constexpr int delta_columns() {
    return kD < 64 ? kD : 64;
  }
};
#elif ATTNFUZZ_FLASH_MUTANT == 6
struct PlantedBug : NoPlantedBug {
  __device__ static __forceinline__ int64_t dkdv_unit_column(int64_t n_block, int units_per_tile, int wg) {
    return n_block * units_per_tile + (n_block > 0 ? 0 : wg);
  }
};
#else
#error "no planted bug of this index"
#endif

}  // namespace attnfuzz::flash
