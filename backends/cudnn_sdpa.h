#pragma once
// The `cudnn` backend: cuDNN's fused SDPA, forward and backward, through the cuDNN
// frontend's graph API (docs/semantics.md, "Implementations under test"; docs/gpu.md).
//
// cuDNN has no arbitrary mask input, so every Problem's dense mask is mapped onto
// cuDNN's native masking when some native configuration reproduces it exactly
// (diagonal band, padding to per-batch lengths, or both), and onto an additive bias
// tensor otherwise. A score bias (harness/case.h, ScoreBias) rides in cuDNN's bias input,
// next to a native mask or inside the bias that carries the mask. That mapping is a pure
// function, declared here so it is tested without a GPU. This header needs no CUDA or cuDNN
// header.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/backend.h"

namespace attnfuzz {

std::unique_ptr<Backend> make_cudnn_sdpa_backend();
// cuDNN's packed (ragged offsets) and paged K/V interfaces on the same graphs: `cudnn.varlen` and
// `cudnn.paged` (backends/cudnn_varlen.h, which also declares these).
std::unique_ptr<Backend> make_cudnn_varlen_backend();
std::unique_ptr<Backend> make_cudnn_paged_backend();

// Whether the backend can run here; when not, `why` (if given) says why: no CUDA
// device (the CUDA runtime's error), a cuDNN runtime older than 9, cudnnCreate failing.
// Cheap after the first call (the answer is cached) and safe without a GPU.
bool cudnn_sdpa_available(std::string* why);

// For the environment recorded with findings: {"cudnn_runtime": "91900" (cudnnGetVersion()),
// "cudnn_compiled": "91900" (the headers built against), "cudnn_frontend": "1.32.0"},
// plus "cudnn_device": "unavailable: <why>" when no GPU can run it.
std::map<std::string, std::string> cudnn_sdpa_environment();

// How one Problem's mask is handed to cuDNN. The fields mirror cuDNN's SDPA attributes.
// With i the query row and j the key column of batch b, a native plan sees (b, i, j) iff
//   padding:      i < seq_len_q[b] and j < seq_len_kv[b]                (set_padding_mask)
//   right_bound:  j <= i + shift + right_bound                            (set_diagonal_band_right_bound)
//   left_bound:   j >  i + shift - left_bound                             (set_diagonal_band_left_bound)
// where shift (set_diagonal_alignment) is 0 for top_left, and for bottom_right it is
// Skv - Sq without padding, seq_len_kv[b] - seq_len_q[b] with it (cuDNN aligns the
// diagonal to each sequence's actual end). A native plan is the same for every head.
// The bias plan instead adds 0 (the score bias, when the call has one) where p.mask is
// visible and a large finite negative value elsewhere, so it reproduces p.mask by
// construction. cuDNN adds its bias input to the scaled scores before it masks:
//   S_ij = scale q_i . k_j + bias_ij, then the native mask
// which is the semantics' order without a softcap (the backend takes none).
struct CudnnMaskPlan {
  std::vector<int32_t> seq_len_q, seq_len_kv;  // both empty: no padding mask
  std::optional<int64_t> left_bound;           // >= 1 when set (cuDNN rejects <= 0)
  std::optional<int64_t> right_bound;          // >= 0 when set (cuDNN rejects < 0)
  Align alignment = Align::top_left;           // meaningful only with a bound
  // The bias fallback: the mask as a bias tensor.
  bool bias = false;
  // The call's score bias rides in the bias tensor (with a native plan, alone).
  bool score_bias = false;
  // The bias tensor is [B or 1][Hq or 1][Sq][Skv]: broadcast over the batch (heads) when
  // every batch (head) has the same mask (the fallback) and the score bias does not span it.
  bool bias_per_batch = false, bias_per_head = false;

  bool padding() const { return !seq_len_q.empty(); }
  bool native() const { return !bias; }
  // Whether the graph takes a bias tensor.
  bool bias_input() const { return bias || score_bias; }
  // "none", "causal_tl", "causal_br", "band_br(left=3,right=0)", each with "+padding", then with a
  // score bias "+bias[B,1]"; or the fallback "bias[B,1]".
  std::string describe() const;
  bool operator==(const CudnnMaskPlan&) const = default;
};

// Whether the plan makes (b, h, i, j) visible: the model of cuDNN's masking above.
bool cudnn_mask_plan_visible(const CudnnMaskPlan& plan, const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j);

// Every plan whose modelled mask equals p.mask element for element, in the order the
// backend tries them (the first cuDNN accepts is used): without padding before with;
// within each, no mask, top-left causal, bottom-right causal, then diagonal bands
// (top-left, then bottom-right alignment) with bounds read off the dense mask. The
// bias plan always comes last, so the list is never empty. With a score bias every plan
// carries it (score_bias, broadcast as the bias tensor's extents say).
std::vector<CudnnMaskPlan> cudnn_mask_plans(const Problem& p);
// The first of cudnn_mask_plans(p): the plan used when cuDNN accepts every candidate.
CudnnMaskPlan plan_cudnn_mask(const Problem& p);

// The native plans a packed (`cudnn.varlen`) or paged (`cudnn.paged`) call can use, in the order
// they are tried: padding to per-sequence lengths no longer than the rows and keys the call's
// packed buffers hold (Problem::call_len_q, call_len_kv), first those lengths themselves, then
// the shortest lengths that keep every visible element (as cudnn_mask_plans finds them); over
// each, no mask, causal and diagonal bands as native_candidates orders them, each reproducing
// p.mask element for element (cudnn_mask_plan_visible). Empty where the heads' masks differ or
// no native plan reproduces the mask: those backends have no bias to fall back on. The plans
// carry no score bias.
std::vector<CudnnMaskPlan> cudnn_varlen_mask_plans(const Problem& p);

// The plan a `cudnn` backend object runs for p (after cuDNN accepted it), or nothing when
// it cannot run p or `backend` is not a cudnn backend. For tests that must know which
// native path they exercised.
std::optional<CudnnMaskPlan> cudnn_sdpa_selected_plan(const Backend& backend, const Problem& p);

}  // namespace attnfuzz
