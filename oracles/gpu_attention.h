#pragma once
// The GPU oracle computations (oracles/gpu_attention.cu), behind a plain C++ interface so
// that code compiled by the C++ compiler never sees CUDA headers:
//  - the float64 reference: docs/semantics.md ("Forward", "Backward") in float64 with fused multiply-adds;
//  - the contract baselines: oracles/emulated.cpp's naive computation under a contract,
//    the same rounding points and the same accumulation order (forward or reversed).
// Both compute every (batch, head) as a sequence of tiled matrix products over per-head
// Sq x Skv buffers in device memory (scores, then P; dP, then dS), a group of heads at a
// time within a memory budget; 64 x 64 tiles the mask hides completely are skipped.
//
//   forward:  S_pre = scale Q K^T, S = softcap(S_pre) + bias (softcap: c tanh(S_pre / c);
//             bias: the score bias, 0 without one), masked -> -inf,
//             LSE = log sum exp S (natural log; -inf on rows with no visible key),
//             P = exp(S - LSE), O = P V
//   backward: D = rowsum(dO * O), dP = dO V^T, dS = P (dP - D + dLSE) [(1 - tanh^2(S_pre / c))],
//             dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO (dK, dV summed over the group)
// The contract baselines add the bias in the accumulation type after the softcap, as
// oracles/emulated.cpp does (the bias is in the case dtype, so converting it is exact).
// dBias (the bracketed chain factor left out) is not computed.
#include <cstdint>
#include <optional>
#include <string>

#include "harness/contract.h"
#include "harness/dtype.h"

namespace attnfuzz::gpu {

// One attention call in host memory: dense row-major float64 tensors, as a Problem holds them.
struct HostAttention {
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_kv = 1, dim_qk = 1, dim_v = 1;
  double scale = 1.0;
  std::optional<double> softcap;
  const double* q = nullptr;  // [B][Hq][Sq][Dqk]
  const double* k = nullptr;  // [B][Hkv][Skv][Dqk]
  const double* v = nullptr;  // [B][Hkv][Skv][Dv]
  // [B][Hq][Sq][Skv], 1 = visible; or one [Sq][Skv] plane that every (b, h) shares.
  const uint8_t* mask = nullptr;
  bool mask_one_plane = false;
  // The score bias (harness/case.h, ScoreBias), dense [E0][E1][E2][E3] with each extent E
  // either the problem's (B, Hq, Sq, Skv) or 1, broadcast over the dimensions of extent 1;
  // null without one.
  const double* bias = nullptr;
  int64_t bias_extent[4] = {1, 1, 1, 1};
};

// How to compute: the float64 reference, or the naive computation under a contract with
// outputs stored in the case dtype (oracles/emulated.cpp).
struct Numerics {
  bool reference64 = true;
  Contract contract = Contract::fp64;
  DType dtype = DType::f32;
  bool reversed = false;
};

// Where the time of the last call went (milliseconds, host clock around synchronous steps):
// host (the Problem turned into kernel inputs: the mask's plane check, the output tensors;
// filled by oracles/gpu_oracles.cpp), upload (allocations, copies, mask tiles), compute
// (the kernels), download, release (freeing device memory).
struct Timing {
  double host_ms = 0, upload_ms = 0, compute_ms = 0, download_ms = 0, release_ms = 0;
};

// Whether a CUDA device can run the kernels here, or why not.
bool device_available(std::string* why);
std::string device_description();

// o: [B][Hq][Sq][Dv], lse: [B][Hq][Sq].
void forward(const HostAttention& a, const Numerics& n, double* o, double* lse, Timing* t = nullptr);
// o: the forward's output (for D = rowsum(dO * O)); d_out: [B][Hq][Sq][Dv]; d_lse: [B][Hq][Sq].
void backward(const HostAttention& a, const Numerics& n, const double* o, const double* d_out, const double* d_lse, double* dq, double* dk,
              double* dv, Timing* t = nullptr);

}  // namespace attnfuzz::gpu
