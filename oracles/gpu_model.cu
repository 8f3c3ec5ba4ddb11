// The error model's sigma and row dof on the GPU: oracles/gpu_model.h.
#include <vector>

#include "oracles/device_common.cuh"
#include "oracles/gpu_model.h"

namespace attnfuzz::gpu {
namespace {

// How many different values a row holds: exactly equal ones count once, each NaN apart (NaN
// equals nothing), as harness/error_model.cpp's distinct_values counts them.
__device__ double distinct_values(const double* x, int64_t n) {
  int64_t distinct = 0;
  for (int64_t d = 0; d < n; ++d) {
    bool first = true;
    for (int64_t e = 0; e < d && first; ++e) first = !(x[e] == x[d]);
    distinct += first;
  }
  return static_cast<double>(distinct > 1 ? distinct : 1);
}

__global__ void model_rows(TensorId t, model_row::TermArrays terms, const double* ref, RoundingUnits u, int64_t rows, int64_t width,
                           const double* phasor, double* sigma, double* dof) {
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const size_t r = static_cast<size_t>(row), w = static_cast<size_t>(width);
    dof[row] = model_row::model_row(t, terms, ref, u, r, width, distinct_values(ref + r * w, width), phasor, sigma + r * w);
  }
}

__global__ void model_elements(TensorId t, model_row::TermArrays terms, const double* ref, RoundingUnits u, int64_t n, int64_t width,
                               double* sigma) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    sigma[e] = sqrt(model_row::element_variance(t, terms, ref[e], u, static_cast<size_t>(e), static_cast<size_t>(e / width)).total());
}

}  // namespace

void output_model(const ModelInput& in, double* sigma_host, double* row_dof_host) {
  const size_t rows = static_cast<size_t>(in.rows), n = rows * static_cast<size_t>(in.width);
  if (n == 0) return;
  std::vector<SharedCopy> held;  // the device copies this call reads
  const auto on_device = [&](const double* host, size_t count) -> const double* {
    if (!host) return nullptr;
    held.push_back(device_copy(host, count));
    return held.back()->doubles();
  };
  const model_row::TermArrays& h = in.terms;
  model_row::TermArrays d = h;
  for (auto [dst, src] : {std::pair{&d.operand, h.operand}, {&d.stored, h.stored}, {&d.score, h.score}, {&d.via_op, h.via_op},
                          {&d.via_st, h.via_st}, {&d.via_acc, h.via_acc}, {&d.via_sc, h.via_sc}, {&d.underflow, h.underflow},
                          {&d.subnormal, h.subnormal}, {&d.normalizer_lse, h.normalizer_lse}, {&d.normalizer_acc, h.normalizer_acc},
                          {&d.truncation, h.truncation}})
    *dst = on_device(src, n);
  for (auto [dst, src] : {std::pair{&d.operand_sources, h.operand_sources}, {&d.score_sources, h.score_sources},
                          {&d.subnormal_sources, h.subnormal_sources}, {&d.row_lse, h.row_lse}, {&d.direction_sources, h.direction_sources}})
    *dst = on_device(src, rows);
  const double* ref = on_device(in.ref, n);
  const FreshDoubles sigma = fresh_doubles(static_cast<int64_t>(n));
  if (in.row_dof) {
    const double* phasor = on_device(model_row::phase_table(), size_t{2} << model_row::kPhaseBits);
    const FreshDoubles dof = fresh_doubles(in.rows);
    model_rows<<<grid_for(in.rows, 128), 128>>>(in.output, d, ref, in.u, in.rows, in.width, phasor, sigma.get(), dof.get());
    AF_CUDA(cudaGetLastError());
    dof.download_to(row_dof_host);
  } else {
    model_elements<<<grid_for(static_cast<int64_t>(n), kThreads), kThreads>>>(in.output, d, ref, in.u, static_cast<int64_t>(n), in.width,
                                                                             sigma.get());
    AF_CUDA(cudaGetLastError());
  }
  sigma.download_to(sigma_host);
}

}  // namespace attnfuzz::gpu
