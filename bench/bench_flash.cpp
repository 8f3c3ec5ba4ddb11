// Speed of the project's fused kernels (cuda.flash, kernels/flash/) against cuDNN (through our
// cuDNN frontend graphs, backends/cudnn_graph.h) and LibTorch's flash kernel, in one process,
// on the same shapes (llm.c dev/cuda style: one program, a table out).
//
//   bench_flash [--quick] [--iters N] [--dim D] [--seq S] [--causal 0|1]
//     (--quick: S = 1k only; --dim, --seq, --causal: only those cases, e.g. one case for ncu)
//
// Cases (issue 12): bf16, D in {64, 128}, causal and not, S in {1k, 4k, 16k}, B S = 16k
// tokens, H D = 2048. FLOPs: 4 B H Sq Skv D forward, 2.5 times that backward, halved causal.
// Times: CUDA events around N back-to-back calls on the default stream, after warm-up.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/dtype.h"
#include "kernels/flash/flash.h"
#include "backends/cudnn_graph.h"
#if ATTNFUZZ_BENCH_TORCH
#include <ATen/ATen.h>

#include "oracles/torch_cuda_loader.h"
#endif

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) {
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    check(cudaMemset(p, 0, bytes), "cudaMemset");
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Milliseconds per call of f, from CUDA events around `iters` calls after `warmup` calls.
double time_ms(const std::function<void()>& f, int iters, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) f();
  check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t a, b;
  cudaEventCreate(&a), cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(b);
  check(cudaEventSynchronize(b), "timed calls");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a), cudaEventDestroy(b);
  return ms / iters;
}

struct Row {
  int64_t d, s;
  bool causal;
  double flash_f, flash_b, cudnn_f, cudnn_b, torch_f, torch_b;  // TFLOP/s, 0 = not run
};

std::string cell(double x) {
  char buf[32];
  if (x <= 0) return "   -";
  std::snprintf(buf, sizeof buf, "%4.0f", x);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int iters = 10;
  int64_t only_dim = 0, only_seq = 0;
  int only_causal = -1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dim") && i + 1 < argc)
      only_dim = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--seq") && i + 1 < argc)
      only_seq = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--causal") && i + 1 < argc)
      only_causal = std::atoi(argv[++i]);
  }
#if ATTNFUZZ_BENCH_TORCH
  std::string why;
  const bool torch_ok = attnfuzz::load_torch_cuda(&why);
  if (!torch_ok) std::printf("LibTorch CUDA not loaded: %s\n", why.c_str());
#endif
  attnfuzz::cudnn_detail::GraphCache cudnn;
  std::vector<Row> rows;
  const std::vector<int64_t> seqs = only_seq > 0 ? std::vector<int64_t>{only_seq}
                                    : quick      ? std::vector<int64_t>{1024}
                                                 : std::vector<int64_t>{1024, 4096, 16384};
  for (int64_t d : {64, 128})
    for (bool causal : {false, true})
      if ((only_dim == 0 || only_dim == d) && (only_causal < 0 || only_causal == static_cast<int>(causal)))
        for (int64_t s : seqs) {
          const int64_t tokens = 16384, b = tokens / s, h = 2048 / d;
          const size_t n = static_cast<size_t>(b * h * s * d);
          const double fwd_flop = 4.0 * b * h * s * s * d / (causal ? 2 : 1), bwd_flop = 2.5 * fwd_flop;
          // Inputs: one random bf16 buffer, copied to Q, K, V, dO.
          std::vector<uint16_t> host(n);
          std::mt19937 rng(42);
          std::normal_distribution<float> nd(0.f, 1.f);
          for (auto& x : host) x = attnfuzz::float_to_bf16_bits(nd(rng));
          Buffer q(n * 2), k(n * 2), v(n * 2), o(n * 2), d_o(n * 2), dq(n * 2), dk(n * 2), dv(n * 2);
          Buffer lse(static_cast<size_t>(b * h * s) * 4);
          for (void* p : {q.p, k.p, v.p, d_o.p}) check(cudaMemcpy(p, host.data(), n * 2, cudaMemcpyHostToDevice), "upload");
          Row row{d, s, causal, 0, 0, 0, 0, 0, 0};
          const float scale = 1.f / std::sqrt(static_cast<float>(d));

          // cuda.flash
          attnfuzz::flash::Problem fp;
          fp.elem = attnfuzz::flash::Elem::bf16, fp.head_dim = static_cast<int>(d);
          fp.batch = b, fp.heads_q = h, fp.heads_kv = h, fp.seq_q = s, fp.seq_kv = s, fp.scale = scale;
          if (causal) fp.mask.right = 0;
          const attnfuzz::flash::Strides st{h * s * d, s * d, d}, lst{h * s, s, 1};
          fp.q = q.p, fp.k = k.p, fp.v = v.p, fp.q_strides = fp.k_strides = fp.v_strides = st;
          attnfuzz::flash::ForwardArgs fa{o.p, st, static_cast<float*>(lse.p), lst};
          Buffer ws(attnfuzz::flash::backward_workspace_bytes(fp));
          attnfuzz::flash::BackwardArgs ba;
          ba.o = o.p, ba.o_strides = st, ba.lse = static_cast<float*>(lse.p), ba.lse_strides = lst, ba.d_out = d_o.p, ba.d_out_strides = st;
          ba.dq = dq.p, ba.dk = dk.p, ba.dv = dv.p, ba.dq_strides = ba.dk_strides = ba.dv_strides = st, ba.workspace = ws.p;
          row.flash_f = fwd_flop / time_ms([&] { attnfuzz::flash::forward(fp, fa); }, iters) / 1e9;
          row.flash_b = bwd_flop / time_ms([&] { attnfuzz::flash::backward(fp, ba); }, iters) / 1e9;

          // cuDNN (its own O and stats, from its own forward)
          attnfuzz::cudnn_detail::GraphSpec spec;
          spec.dtype = attnfuzz::DType::bf16;
          spec.batch = b, spec.heads_q = spec.heads_kv = h, spec.seq_q = spec.seq_kv = s, spec.dim_qk = spec.dim_v = d;
          const attnfuzz::cudnn_detail::Strides cs{h * s * d, s * d, d, 1};
          spec.q_stride = spec.k_stride = spec.v_stride = spec.o_stride = cs;
          spec.d_o_stride = spec.d_q_stride = spec.d_k_stride = spec.d_v_stride = cs;
          std::memcpy(&spec.scale_bits, &scale, 4);
          if (causal) spec.right_bound = 0;
          using attnfuzz::cudnn_detail::Pass;
          if (auto e = cudnn.prepare(spec, Pass::forward)) {
            std::printf("cuDNN forward unsupported: %s\n", e->c_str());
          } else {
            attnfuzz::cudnn_detail::DevicePointers ptrs;
            ptrs.q = q.p, ptrs.k = k.p, ptrs.v = v.p, ptrs.o = o.p, ptrs.stats = lse.p, ptrs.d_o = d_o.p;
            ptrs.d_q = dq.p, ptrs.d_k = dk.p, ptrs.d_v = dv.p;
            row.cudnn_f = fwd_flop / time_ms([&] { cudnn.execute(spec, Pass::forward, ptrs, false); }, iters) / 1e9;
            if (auto eb = cudnn.prepare(spec, Pass::backward))
              std::printf("cuDNN backward unsupported: %s\n", eb->c_str());
            else
              row.cudnn_b = bwd_flop / time_ms([&] { cudnn.execute(spec, Pass::backward, ptrs, false); }, iters) / 1e9;
          }

#if ATTNFUZZ_BENCH_TORCH
          if (torch_ok) {
            const auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
            at::Tensor tq = at::randn({b, h, s, d}, opts), tk = at::randn({b, h, s, d}, opts), tv = at::randn({b, h, s, d}, opts);
            at::Tensor tdo = at::randn({b, h, s, d}, opts);
            auto r = at::_scaled_dot_product_flash_attention(tq, tk, tv, 0.0, causal, false, scale);
            row.torch_f =
                fwd_flop / time_ms([&] { at::_scaled_dot_product_flash_attention(tq, tk, tv, 0.0, causal, false, scale); }, iters) / 1e9;
            const int64_t max_q = std::get<4>(r).expect_int(), max_k = std::get<5>(r).expect_int();
            row.torch_b = bwd_flop /
                          time_ms(
                              [&] {
                                at::_scaled_dot_product_flash_attention_backward(tdo, tq, tk, tv, std::get<0>(r), std::get<1>(r),
                                                                                 std::get<2>(r), std::get<3>(r), max_q, max_k, 0.0, causal,
                                                                                 std::get<6>(r), std::get<7>(r), scale);
                              },
                              iters) /
                          1e9;
          }
#endif
          check(cudaDeviceSynchronize(), "case");
          rows.push_back(row);
          std::printf("D=%lld S=%lld causal=%d done\n", static_cast<long long>(d), static_cast<long long>(s), causal);
          std::fflush(stdout);
        }

  std::printf("\nTFLOP/s, bf16, B*S = 16k tokens, H*D = 2048 (FLOPs 4 B H S^2 D fwd, x2.5 bwd, /2 causal)\n");
  std::printf("|   D |     S | causal | flash fwd | cuDNN fwd | torch fwd | flash bwd | cuDNN bwd | torch bwd | fwd/cuDNN | bwd/cuDNN |\n");
  std::printf("|-----|-------|--------|-----------|-----------|-----------|-----------|-----------|-----------|-----------|-----------|\n");
  for (const Row& r : rows)
    std::printf("| %3lld | %5lld | %-6s |      %s |      %s |      %s |      %s |      %s |      %s |      %4.2f |      %4.2f |\n",
                static_cast<long long>(r.d), static_cast<long long>(r.s), r.causal ? "yes" : "no", cell(r.flash_f).c_str(),
                cell(r.cudnn_f).c_str(), cell(r.torch_f).c_str(), cell(r.flash_b).c_str(), cell(r.cudnn_b).c_str(), cell(r.torch_b).c_str(),
                r.cudnn_f > 0 ? r.flash_f / r.cudnn_f : 0.0, r.cudnn_b > 0 ? r.flash_b / r.cudnn_b : 0.0);
  return 0;
}
