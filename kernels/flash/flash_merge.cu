// The fused LSE merge (flash.h): one warp per row, all parts of the row at once.
//   forward:  L = logsumexp_k L_k (-inf when every L_k is),  w_k = exp(L_k - L) (0 when L_k = -inf),
//             O = sum_k w_k O_k
//   backward: dO_k = w_k dO,  dL_k = w_k (rowsum(dO O_k) - rowsum(dO O) + dL)
// The weights are computed from the max, so no exp overflows and a -inf part never makes NaN.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/flash/flash.h"

namespace attnfuzz::flash {
namespace {

__device__ float merged_lse(int n, int64_t rows, int64_t r, const float* lse_parts) {
  float mx = -INFINITY;
  for (int k = 0; k < n; ++k) mx = fmaxf(mx, lse_parts[k * rows + r]);
  if (mx == -INFINITY) return -INFINITY;
  float sum = 0.f;
  for (int k = 0; k < n; ++k) sum += expf(lse_parts[k * rows + r] - mx);
  return mx + logf(sum);
}

__device__ float weight(float lse_k, float lse) { return lse_k == -INFINITY ? 0.f : expf(lse_k - lse); }

__device__ float warp_sum(float x) {
  for (int off = 16; off; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

__global__ void merge_forward_kernel(int n, int64_t rows, int64_t dim, const float* o_parts, const float* lse_parts, float* o, float* lse) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float l = merged_lse(n, rows, r, lse_parts);
  for (int64_t d = lane; d < dim; d += 32) {
    float acc = 0.f;
    for (int k = 0; k < n; ++k) acc += weight(lse_parts[k * rows + r], l) * o_parts[(k * rows + r) * dim + d];
    o[r * dim + d] = acc;
  }
  if (lane == 0) lse[r] = l;
}

__global__ void merge_backward_kernel(int n, int64_t rows, int64_t dim, const float* o_parts, const float* lse_parts, const float* o,
                                      const float* lse, const float* d_out, const float* d_lse, float* d_o_parts, float* d_lse_parts) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float l = lse[r];
  float dot_merged = 0.f;
  for (int64_t d = lane; d < dim; d += 32) dot_merged += d_out[r * dim + d] * o[r * dim + d];
  dot_merged = warp_sum(dot_merged);
  for (int k = 0; k < n; ++k) {
    const float w = l == -INFINITY ? 0.f : weight(lse_parts[k * rows + r], l);
    float dot = 0.f;
    for (int64_t d = lane; d < dim; d += 32) {
      dot += d_out[r * dim + d] * o_parts[(k * rows + r) * dim + d];
      d_o_parts[(k * rows + r) * dim + d] = w * d_out[r * dim + d];
    }
    dot = warp_sum(dot);
    if (lane == 0) d_lse_parts[k * rows + r] = w * (dot - dot_merged + d_lse[r]);
  }
}

void check(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

unsigned blocks_for(int64_t rows) { return static_cast<unsigned>((rows * 32 + 255) / 256); }

}  // namespace

void merge_forward(int n, int64_t rows, int64_t dim, const float* o_parts, const float* lse_parts, float* o, float* lse, void* stream) {
  if (rows == 0) return;
  merge_forward_kernel<<<blocks_for(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(n, rows, dim, o_parts, lse_parts, o, lse);
  check("flash merge forward");
}

void merge_backward(int n, int64_t rows, int64_t dim, const float* o_parts, const float* lse_parts, const float* o, const float* lse,
                    const float* d_out, const float* d_lse, float* d_o_parts, float* d_lse_parts, void* stream) {
  if (rows == 0) return;
  merge_backward_kernel<<<blocks_for(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(n, rows, dim, o_parts, lse_parts, o, lse, d_out,
                                                                                         d_lse, d_o_parts, d_lse_parts);
  check("flash merge backward");
}

}  // namespace attnfuzz::flash
