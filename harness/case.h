#pragma once
// The Case: a complete, serializable description of one attention problem
// (docs/semantics.md, "The problem space"). Everything a backend computes, and every
// input value, follows from a Case alone.
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "harness/dtype.h"
#include "harness/layout.h"
#include "harness/mask.h"

namespace attnfuzz {

inline constexpr const char* kCaseFormat = "attnfuzz-case/1";

struct Shape {
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_kv = 1, head_dim_qk = 16, head_dim_v = 16;
  int64_t group() const { return heads_q / heads_kv; }
  bool operator==(const Shape&) const = default;
};

struct ValueDist {
  enum class Kind {
    normal,         // mean + sigma * N(0, 1)
    uniform,        // mean + sigma * U(-1, 1)
    large_logit,    // normal with a large sigma: saturated softmax
    near_constant,  // mean + sigma * N(0, 1) with tiny sigma (0 gives exact ties)
    outliers,       // normal, but a `fraction` of elements are +-magnitude
    zero,           // all zeros (the natural dLSE)
    // The values that break kernels (docs/case-format.md, "Values that break kernels"). A row
    // is the innermost dimension (D for Q, K, V, dO); rows are picked per (seed, tensor, row).
    row_shift,    // normal, but column 0 of a `fraction` of the rows holds `magnitude`: with Q's
                  // -a (or +a) and K's +a in every row, those query rows' scores all move by
                  // -a^2 (or +a^2) times the scale, and their LSE with them (the others move by
                  // a q_i0 times the scale): far below zero, or near the overflow range
    sparse_rows,  // normal in a `fraction` of the rows, exactly 0 in the others (0: all zero)
    subnormal,    // normal, but a `fraction` of elements are +-U(0, 1) * magnitude (the generator
                  // gives the dtype's smallest normal number: subnormal once rounded)
    nonfinite,    // normal, but one element of the first row and of a `fraction` of the other rows
                  // is NaN (magnitude 0), +Inf (magnitude > 0) or -Inf (magnitude < 0): Q, K, V
                  // and dO only (docs/semantics.md, "Non-finite inputs")
  };
  Kind kind = Kind::normal;
  double mean = 0.0, sigma = 1.0, fraction = 0.0, magnitude = 0.0;
  bool operator==(const ValueDist&) const = default;
};

// How the result is computed from backend calls (docs/semantics.md, "Compositions").
struct Composition {
  enum class Kind {
    single,          // one call over the whole problem
    kv_split,        // keys cut at `bounds`, parts merged through their LSEs
    q_split,         // queries cut at `bounds`, parts concatenated
    mask_partition,  // the mask cut into a band (window) and the rest, merged through LSEs
  };
  Kind kind = Kind::single;
  std::vector<int64_t> bounds;                // kv_split / q_split: interior cut points, strictly increasing
  int64_t window_left = 0, window_right = 0;  // mask_partition: the local band (-1 = unbounded)
  Align window_align = Align::top_left;
  // Sub-compositions: none (every part a single call), one (applied to every part)
  // or one per part (kv/q split: bounds.size() + 1; mask_partition: local, global).
  std::vector<Composition> children;
  bool operator==(const Composition&) const = default;
};

// An additive bias on the scores (docs/semantics.md, "Score bias"): after the scale and the softcap,
// before the mask and the softmax,
//   S_ij = softcap(scale q_i . k_j) + bias[b][h][i][j]
// The bias is an input in the case dtype (held exactly in float64), broadcast over the dimensions
// it does not span. Three kinds, all handed to backends as that one tensor:
struct ScoreBias {
  enum class Kind {
    tensor,    // elements drawn from `values`, shaped [B|1][Hq|1][Sq|1][Skv|1] (`spans`)
    alibi,     // ALiBi: -slope_h |j - i - (Skv - Sq)| (bottom-right aligned, FlashAttention's),
               // slope_h = 2^(-8 (h + 1) / Hq), rounded to the case dtype; shaped [1][Hq][Sq][Skv]
    relative,  // a relative-position table: table[h][j - i + Sq - 1], Hq x (Sq + Skv - 1) entries
               // drawn from `values`; shaped [1][Hq][Sq][Skv]
  };
  Kind kind = Kind::tensor;
  // tensor: whether it spans (batch, heads_q, seq_q, seq_kv); a dimension it does not span has
  // extent 1 and is broadcast. alibi and relative span heads, seq_q and seq_kv.
  std::array<bool, 4> spans{true, true, true, true};
  ValueDist values;
  // The bias is a leaf that needs its gradient: the backward returns dBias (the sum of dS over the
  // broadcast dimensions, shaped like the bias), judged as a sixth output.
  bool requires_grad = false;
  bool operator==(const ScoreBias&) const = default;

  // The bias tensor's shape for a case of shape `s`: [B|1][Hq|1][Sq|1][Skv|1].
  std::vector<int64_t> tensor_shape(const Shape& s) const;
};

// A ragged batch (docs/semantics.md, "Ragged batches"): sequence b has lens_q[b] queries and
// lens_kv[b] keys, from 0 to the shape's seq_q and seq_kv (the padded length), and its mask is
// evaluated in its own lens_q[b] x lens_kv[b] coordinates (a bottom-right diagonal is each
// sequence's own). Queries and keys past a sequence's lengths are absent: no query sees such a
// key and such a query sees none, so its O is 0, its LSE -inf, and dQ, dK, dV are 0 there.
// Backends that take the dense tensors get them padded to seq_q and seq_kv, the absent rows and
// keys masked. Varlen interfaces get packed tokens, [sum of lengths][H][D], with cumulative offsets
// (cu_seqlens); gap_q and gap_kv rows lie between consecutive sequences of Q (and dO, O) and of
// K and V, and `tail` rows after the last one (a buffer's spare capacity). Gaps and tail hold NaN:
// reading them must not reach any output. Paged interfaces (a KV cache) get K and V in pages of
// `page_size` rows through a page table (page_table below); 0: no paged layout.
// Two edges of those interfaces, each with one right answer (the attention above, unchanged):
// `max_slack` makes the maximum lengths a varlen interface is told (max_seqlen_q, max_seqlen_k)
// larger than the longest sequence by that many rows (an upper bound is all they promise), and
// `misaligned` starts every packed buffer one element past the allocator's alignment (a view into
// a larger buffer, as a slice of a packed batch is). A backend must compute them correctly or
// refuse cleanly. Maxima below the longest sequence, non-monotonic offsets and page indices out
// of range have no right answer and no field: the interfaces document them as preconditions they
// cannot check without reading device memory.
struct Ragged {
  std::vector<int64_t> lens_q, lens_kv;  // one per batch entry
  int64_t gap_q = 0, gap_kv = 0, tail = 0;
  int64_t page_size = 0;
  int64_t max_slack = 0;
  bool misaligned = false;
  bool operator==(const Ragged&) const = default;

  // Where each sequence starts in the packed tokens: offsets[b] = sum over c < b of (lens[c] + gap),
  // B + 1 entries, the last one the end of the last sequence (its gap not counted).
  std::vector<int64_t> starts_q() const;
  std::vector<int64_t> starts_kv() const;
};
// The largest gap or tail a case may ask for, in rows, and the largest page.
inline constexpr int64_t kMaxRaggedGap = 4096;
inline constexpr int64_t kMaxPageSize = 256;

// A paged KV cache's page table for a ragged batch with page_size P > 0: sequence b's keys
// [p P, (p + 1) P) live in physical page table[b][p], for p < ceil(lens_kv[b] / P); the table is
// [B][max over b of that count] (unused entries -1). The physical pages are every sequence's pages
// plus one spare page, in an order drawn from `seed` (a permutation: no page is shared), so
// `pages` = 1 + the sum of the counts. A page's rows past its sequence's last key, and the spare
// page, hold NaN.
struct PageTable {
  int64_t pages = 0, max_pages_per_seq = 0;
  std::vector<int64_t> table;  // [B][max_pages_per_seq]
  int64_t at(int64_t b, int64_t p) const { return table[static_cast<size_t>(b * max_pages_per_seq + p)]; }
};
PageTable page_table(const Ragged& r, uint64_t seed);
// The same table for any key lengths (a call's own, or the whole problem's): it reads only them
// and the page size.
PageTable page_table(const std::vector<int64_t>& lens_kv, int64_t page_size, uint64_t seed);

struct Case {
  uint64_t seed = 0;
  Shape shape;
  DType dtype = DType::f32;
  Layouts layouts;                // per tensor, how it is laid out in memory handed to a backend (harness/layout.h)
  std::optional<double> scale;    // default 1/sqrt(head_dim_qk)
  std::optional<double> softcap;  // S = c * tanh(S / c)
  std::optional<ScoreBias> bias;  // added after the softcap (above)
  std::optional<Ragged> ragged;   // per-sequence lengths (above); none: every sequence is seq_q x seq_kv
  MaskExpr mask;
  ValueDist q, k, v;
  ValueDist d_out;
  ValueDist d_lse{ValueDist::Kind::zero};
  Composition composition;
  bool operator==(const Case&) const = default;

  double effective_scale() const;
};

// Fits a ragged batch to a shape a generator or the shrinker changed: one pair of lengths per batch
// entry (a new entry full length), each clamped to the padded lengths.
void conform_ragged(Case& c);

// The values that break kernels a case holds (docs/fuzzing.md, "Values that break kernels"),
// as campaigns count them (summary.json, coverage.case_mix.values). One row per feature.
#define ATTNFUZZ_VALUE_FEATURES(X)                                                                  \
  X(lse_far_below_zero)   /* Q and K row_shift of opposite signs: rows whose scores all sit far below zero */ \
  X(logits_near_overflow) /* Q and K row_shift of one sign: scores near the fp16 overflow range */             \
  X(subnormal_inputs)     /* Q, K or V with subnormal elements */                                              \
  X(d_out_zero_rows)      /* dO exactly zero in rows (sparse_rows) */                                          \
  X(d_out_large)          /* dO with sigma >= 8 */                                                             \
  X(d_lse_large)          /* dLSE with sigma >= 8 */                                                           \
  X(nonfinite_inputs)     /* NaN or +-Inf elements in Q, K, V or dO */
enum class ValueFeature {
#define ATTNFUZZ_VALUE_FEATURE_ENUM(name) name,
  ATTNFUZZ_VALUE_FEATURES(ATTNFUZZ_VALUE_FEATURE_ENUM)
#undef ATTNFUZZ_VALUE_FEATURE_ENUM
};
const char* to_string(ValueFeature f);
std::optional<ValueFeature> value_feature_from_string(const std::string& s);
std::vector<ValueFeature> value_features(const Case& c);
// What the generator and the feature test call large (a dO or dLSE sigma).
inline constexpr double kLargeGradientSigma = 8.0;

// What a run keeps in host memory per (q, kv) pair, beyond the dense masks every run has:
// nothing (a tiled kernel, or one computing on a GPU), one head's Sq x Skv matrices at a time
// (the float64 reference, the contract baselines, the error terms), or every head's at once
// (LibTorch's math graphs on the CPU: scores, softmax and their gradients as B x Hq x Sq x Skv
// tensors). Ordered: each holds at least what the one before holds.
enum class HostScores { none, one_head, every_head };

// Where a run's work lands, for the memory estimate: where the oracle set computes (the CPU set
// keeps one head's float64 matrices in host memory, the GPU set keeps them in device memory)
// and the most any backend under test keeps (Backend::host_scores). The default is the most a
// run can keep: the CPU oracle set and a LibTorch math backend on the CPU.
struct HostWork {
  enum class Oracles { host, device };
  Oracles oracles = Oracles::host;
  HostScores backends = HostScores::every_head;

  // The least any run keeps: its tensors and masks alone (the GPU oracle set, fused backends).
  static constexpr HostWork least() { return {Oracles::device, HostScores::none}; }
  bool operator==(const HostWork&) const = default;
};

struct Limits {
  // Upper bound on the bytes a run of this case may need on the host beyond what the process
  // holds before it, as estimate_host_bytes counts them for `work`.
  uint64_t memory_budget_bytes = uint64_t{8} << 30;
  HostWork work;
};
// Every limit but the memory budget: for reading a case that is checked against the budget
// where it runs, once the backends and the oracle set say where its work lands
// (check_memory_budget: `run`, a worker, the in-process minimizer).
inline constexpr Limits kNoMemoryBudget{std::numeric_limits<uint64_t>::max(), HostWork{}};

// Fixed limits on what one case may ask for (docs/case-format.md, "Limits"), so that a small
// file cannot demand unbounded time: the mask is evaluated at every (q, kv) of every call, and
// a nested composition multiplies its calls.
inline constexpr uint64_t kMaxMaskSize = 4096;                        // mask nodes plus document segments
inline constexpr int kMaxMaskDepth = 17;                              // a leaf is 1: 16 levels of nesting below the root
inline constexpr uint64_t kMaxLeafCalls = 4096;                       // backend calls of one pass over the composition
inline constexpr uint64_t kCompositionWorkFactor = 64;                // its work, relative to the single call's,
inline constexpr uint64_t kCompositionWorkFloor = uint64_t{1} << 26;  // or this much, whichever is larger

// What evaluating a composition costs, computed without running it. Work is counted in
// multiply-adds: sum over calls of B Hq rows cols (Dqk + Dv), plus B Hq rows (Dv + 1) for every
// node (each part's O and LSE are allocated, merged or placed, even for an empty part). Bytes
// are what the evaluation keeps alive at once: every node's O and LSE, every call's inputs and
// dense mask. call_elements and call_pairs are the sums over calls of E and pairs of the call
// (estimate_host_bytes). leaf_calls saturates at UINT64_MAX; the others are only walked when
// leaf_calls <= kMaxLeafCalls (UINT64_MAX otherwise).
struct CompositionCost {
  uint64_t leaf_calls = 0, work = 0, bytes = 0, call_elements = 0, call_pairs = 0;
};
CompositionCost composition_cost(const Case& c, const Composition& comp);

// Throws CaseError (one line: field and reason) when the case cannot run. Checks the limits
// above and the memory estimate before anything is allocated.
void validate(const Case& c, const Limits& limits = {});
// The memory estimate against the budget alone (validate's last check, for a run that learns
// where it computes after the case was read).
void check_memory_budget(const Case& c, const Limits& limits);

// The host memory a run needs beyond what the process holds before its first case (LibTorch and
// the backends loaded: about 130 MiB for `attnfuzz run`): an upper bound of the peak resident
// memory measured over a grid of shapes (docs/campaigns.md, "Memory"; the memory_bound test
// keeps it). With
//   E     = B Hq Sq (Dqk + Dv + 1) + B Hkv Skv (Dqk + Dv)   elements of Q, O, LSE, dQ and K, V, dK, dV
//   pairs = B Hq Sq Skv,  head = Sq Skv
//   calls = the composition's backend calls (none for a single call), E_call and pairs_call each one's
// it is
//   8 E (kTensorCopies + kComposedCopies if composed)   float64 tensors kept through the case: inputs,
//                                                     the reference, the baselines of the fingerprint
//                                                     ladder, error terms and models (the composition's too)
//   + kMaskBytes pairs                                the dense masks (the problem's, the error terms', a
//                                                     backend's copy or bias)
//   + sum over calls (8 kCallCopies E_call + kCallPairBytes pairs_call) + CompositionCost::bytes
//                                                     each call kept with its error terms; the parts' O and
//                                                     LSE, the calls' inputs and masks
//   + scores                                          the per-pair matrices, below
//   + 8 x every tensor's laid-out extent              the copies handed to backends (padding, offsets,
//                                                     packed groups and guards included)
//   + 8 x the packed rows of a ragged batch           a varlen interface's copies: Tq Hq (2 Dqk + 2 Dv + 2)
//                                                     + Tkv Hkv (2 Dqk + 2 Dv), T = the sequences, the gaps
//                                                     between them, the tail and a leading element; and a
//                                                     paged call's pools, (pages + 1) P Hkv (Dqk + Dv)
// saturating at UINT64_MAX, where scores comes from two phases that run one after the other:
//   one   = kHeadPairBytes head           where the oracles run on the host or a backend keeps one head's
//                                         matrices (HostScores::one_head): the error terms' ~20 float64
//                                         Sq x Skv matrices
//   every = kEveryHeadPairBytes pairs     where a backend keeps every head's (every_head): LibTorch's
//                                         graphs, torch.f64's the largest
//   scores = one + every, or max(one, every) when one head's matrix is over glibc's largest mmap
//   threshold (kMmapThreshold): blocks under it come from the heap and stay resident after their phase
//   (fragmented, which also makes kEveryHeadPairBytes larger below it), blocks over it are unmapped
//   when freed. The constants (harness/case.cpp) are the measured bytes, rounded up.
uint64_t estimate_host_bytes(const Case& c, const HostWork& work = {});

std::string to_string(Composition::Kind k);
std::string to_string(ValueDist::Kind k);
const char* to_string(ScoreBias::Kind k);
std::optional<ScoreBias::Kind> bias_kind_from_string(const std::string& s);
// The names of the bias dimensions, in `spans` order: batch, heads, q, kv.
inline constexpr const char* kBiasDimNames[4] = {"batch", "heads", "q", "kv"};
// The largest bias tensor a case may ask for, in elements (as materialized: ScoreBias::tensor_shape).
inline constexpr int64_t kMaxBiasElements = int64_t{1} << 28;
std::string describe(const Composition& c);
std::string describe_shape(const Shape& s);

}  // namespace attnfuzz
