#pragma once
// The error model's sigma and row dof on the GPU (oracles/gpu_model.cu): harness/model_row.h's
// formula, the same operations in the same order as the host's (the file is compiled without
// contracting multiplies and adds), so the same bits. One thread per row where rows have a dof
// (model_row), one per element where they do not (an LSE, terms without sources). The terms and
// the reference reach the device through the mirror (oracles/device_mirror.h): the error terms'
// and the reference's downloads are found there, not sent again; sigma and the dof come back and
// are kept there for the verdict's sums.
#include <cstdint>

#include "harness/model_row.h"

namespace attnfuzz::gpu {

struct ModelInput {
  TensorId output = TensorId::O;
  RoundingUnits u;
  model_row::TermArrays terms;  // host arrays: rows x width elements, or one per row (the sources, row_lse)
  const double* ref = nullptr;  // host, rows x width
  int64_t rows = 0, width = 1;
  bool row_dof = true;  // model_row per row, or each element's sigma alone
};

// sigma: rows x width host doubles; row_dof: rows of them, where in.row_dof.
void output_model(const ModelInput& in, double* sigma, double* row_dof);

}  // namespace attnfuzz::gpu
