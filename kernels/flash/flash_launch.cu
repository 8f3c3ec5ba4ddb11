// The launcher: checks a problem, then dispatches to the instantiation for its head dim and
// element type (flash_launch.h).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/flash/flash_launch.h"

namespace attnfuzz::flash {

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

int schedule_group(const Problem& p, int64_t planes, int64_t stream_bytes_per_plane) {
  static const int64_t forced = [] {
    const char* e = std::getenv("ATTNFUZZ_FLASH_GROUP");
    return e ? std::max<int64_t>(0, std::atoll(e)) : int64_t{0};
  }();
  const bool uniform = !p.mask.dense && p.mask.left < 0 && p.mask.right < 0;
  constexpr int64_t kL2Budget = int64_t{16} << 20;
  int64_t group = forced > 0 ? forced : uniform ? 1 : kL2Budget / std::max<int64_t>(1, stream_bytes_per_plane);
  group = std::min(std::max<int64_t>(group, 1), std::max<int64_t>(planes, 1));
  return static_cast<int>(group);
}

TileShape forward_tile(int head_dim) {
  return head_dim == 64 ? TileShape{ForwardTraits<64, cutlass::bfloat16_t>::kRows, ForwardTraits<64, cutlass::bfloat16_t>::kCols}
                        : TileShape{ForwardTraits<128, cutlass::bfloat16_t>::kRows, ForwardTraits<128, cutlass::bfloat16_t>::kCols};
}
TileShape backward_tile(int head_dim) {
  // The dense mask's tile classes come in the backward's mask units (each warpgroup's part of a step).
  const int unit = head_dim == 64 ? BackwardTraits<64, cutlass::bfloat16_t>::kMaskTile : BackwardTraits<128, cutlass::bfloat16_t>::kMaskTile;
  return TileShape{unit, unit};
}

bool aligned_for_kernels(const void* ptr, const Strides& s) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0;
}

bool instantiated(Elem e, int head_dim) {
  if (ATTNFUZZ_FLASH_PLANTED_BUILD && e != Elem::bf16) return false;  // flash_fwd.cu, flash_bwd.cu
  return head_dim == 64 || head_dim == 128;
}

bool supported(const Problem& p, const char** why) {
  const char* reason = nullptr;
  if (!instantiated(p.elem, p.head_dim))
    reason = "no kernel instantiated for this head dim and element type";
  else if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    reason = "heads_q must be a multiple of heads_kv";
  else if (p.batch > 65535 || p.heads_q > 65535)
    reason = "batch and heads must each be at most 65535 (grid limits)";
  else if (p.seq_q < 1 || p.seq_kv < 1)
    reason = "empty sequences";
  else if (!aligned_for_kernels(p.q, p.q_strides) || !aligned_for_kernels(p.k, p.k_strides) || !aligned_for_kernels(p.v, p.v_strides))
    reason = "Q, K and V must be 16-byte aligned with strides that are multiples of 8 elements";
  else if (p.ragged.lens_q && (!p.ragged.lens_kv || !p.ragged.starts_q || (!p.ragged.starts_kv && !p.pages.table)))
    reason = "a ragged batch needs both sides' lengths and starts (the keys' starts unless K and V are paged)";
  else if ((p.ragged.lens_q || p.pages.table) && p.mask.dense)
    reason = "a ragged batch or a paged cache takes a band mask, not a dense one";
  else if (p.pages.table && (!p.ragged.lens_q || p.pages.page_size < 1 || p.pages.table_stride < 1))
    reason = "a paged cache needs a ragged batch's lengths, a page size and a table stride";
  if (why) *why = reason;
  return reason == nullptr;
}

size_t backward_workspace_bytes(const Problem& p) { return static_cast<size_t>(2 * p.batch * p.heads_q * p.seq_q) * sizeof(float); }

namespace {
// The one dispatch: the instantiation for the problem's head dim and element type.
template <class Params>
void dispatch(const Problem& p, const Params& params, cudaStream_t stream) {
  constexpr bool fwd = std::is_same_v<Params, ForwardParams>;
  auto run = [&](auto d, auto e) {
    using E = decltype(e);
    constexpr int D = decltype(d)::value;
    if constexpr (fwd)
      run_forward<D, E>(params, stream);
    else
      run_backward<D, E>(params, stream);
  };
  auto by_dim = [&](auto e) {
    if (p.head_dim == 64)
      run(std::integral_constant<int, 64>{}, e);
    else
      run(std::integral_constant<int, 128>{}, e);
  };
#if ATTNFUZZ_FLASH_PLANTED_BUILD
  by_dim(cutlass::bfloat16_t{});  // the only element type instantiated()
#else
  if (p.elem == Elem::f16)
    by_dim(cutlass::half_t{});
  else
    by_dim(cutlass::bfloat16_t{});
#endif
}

void require(const Problem& p) {
  const char* why = nullptr;
  if (!supported(p, &why)) throw std::invalid_argument(std::string("flash: ") + why);
}
}  // namespace

void forward(const Problem& p, const ForwardArgs& a) {
  require(p);
  if (!aligned_for_kernels(a.o, a.o_strides)) throw std::invalid_argument("flash: O must be aligned like Q");
  const ForwardParams params{p, a};
  dispatch(p, params, static_cast<cudaStream_t>(p.stream));
}

void backward(const Problem& p, const BackwardArgs& a) {
  require(p);
  if (p.pages.table) throw std::invalid_argument("flash: the backward takes no paged cache (pack K and V)");
  for (auto [ptr, s] : {std::pair{static_cast<const void*>(a.dq), a.dq_strides}, std::pair{static_cast<const void*>(a.dk), a.dk_strides},
                        std::pair{static_cast<const void*>(a.dv), a.dv_strides}, std::pair{a.d_out, a.d_out_strides}})
    if (!aligned_for_kernels(ptr, s)) throw std::invalid_argument("flash: dO, dQ, dK, dV must be aligned like Q");
  float* ws = static_cast<float*>(a.workspace);
  const int64_t rows = p.batch * p.heads_q * p.seq_q;
  const BackwardParams params{p, a, ws, ws + rows};
  dispatch(p, params, static_cast<cudaStream_t>(p.stream));
}

}  // namespace attnfuzz::flash
