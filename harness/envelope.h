#pragma once
// Support envelopes: what a backend accepts, declared once, as data (docs/semantics.md,
// "Support envelopes"). Two readers: the backend's unsupported_reason (Backend::unsupported_reason
// starts from refusal() below) and the case generators (generators/envelope_cases.h), which aim
// most cases inside the envelopes of the backends under test and a measured share just outside one.
//
// A call P is inside envelope E when every clause holds, in this order (refusal() names the
// first that fails):
//   dtype       P.dtype in E.dtypes
//   head_dim    max(Dqk, Dv) <= E.max_head_dim, and Dqk, Dv are multiples of E.head_dim_multiple
//   head_dims   Dqk == Dv, unless E.distinct_head_dims
//   gqa         Hq == Hkv, unless E.grouped_heads
//   seq         E.min_seq_kv <= Skv, and Sq, Skv <= E.max_seq
//   grid        B <= E.max_batch_heads and Hq <= E.max_batch_heads
//   softcap     no softcap, unless E.softcap
//   bias        no score bias (harness/case.h, ScoreBias), unless E.bias. Unlike the other clauses
//               the default refuses: a bias reaches only code that says it takes one (plugins
//               have no ABI for it; Python adapters declare it), and the clause is always enforced
//   bias_grad   no dBias asked (a bias that requires a gradient: ScoreBias::requires_grad), unless
//               E.bias_grad. Refuses by default and always enforced, as the bias clause is: a
//               backend that takes a bias but returns no dBias cannot be judged on a case that has one
//   ragged      no ragged batch (harness/case.h, Ragged), unless E.ragged. Refuses by default and
//               always enforced, as the bias clause is: code that reads the mask's expression (a
//               plugin, an adapter) rather than the dense mask would not see the sequences' lengths
//   mask        any mask when E.masks == any; with causal_or_none, the call's dense mask is
//               all-visible, or causal (key j visible to query i iff j <= i) with Sq == Skv, where
//               every convention of causal agrees (LibTorch's flash refuses is_causal otherwise).
//               A ragged call (only a backend with E.ragged sees one) is read per sequence: inside
//               each sequence's Lq_b x Lkv_b block (the call's part of it) the mask is all-visible,
//               or causal aligned bottom-right (j <= i + Lkv_b - Lq_b), the one causal every varlen
//               interface takes (FlashAttention's is_causal, cuDNN's padding mask, bottom-right)
//   alignment   for Q, K, V, dO, O, dQ, dK, dV: the base offset and every stride but D's, in
//               bytes of the case dtype, are multiples of E.alignment_bytes (1: any)
//   lse         the LSE (and dLSE) laid out packed [B][H][S] (no offset, no padding), when E.packed_lse
//
// Who has the last word on a call that breaks a clause: each clause the envelope restricts is
//   enforced       the call is refused before the backend sees it (refusal() says why), or
//   library-decided the call goes to the library's own dispatcher (LibTorch's kernel choice,
//                  cuDNN's graph checks, a plugin's or adapter's supports()), and the envelope only
//                  declares what that library accepts for sure. Outside it the rule is reject or
//                  correct: where the library takes the call, its result is judged like any other;
//                  where it does not, it must refuse cleanly.
// Our own kernels enforce every clause; the libraries decide most of theirs.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "harness/case.h"
#include "harness/dtype.h"

namespace attnfuzz {

struct Problem;

enum class MaskSupport { any, causal_or_none };

// The clauses, for the generators' one-clause-outside cases and the reports.
enum class EnvelopeClause { dtype, head_dim, head_dims, gqa, seq, grid, softcap, bias, bias_grad, ragged, mask, alignment, lse };
inline constexpr EnvelopeClause kAllEnvelopeClauses[] = {
    EnvelopeClause::dtype, EnvelopeClause::head_dim, EnvelopeClause::head_dims, EnvelopeClause::gqa,
    EnvelopeClause::seq,   EnvelopeClause::grid,     EnvelopeClause::softcap,   EnvelopeClause::bias,
    EnvelopeClause::bias_grad, EnvelopeClause::ragged, EnvelopeClause::mask, EnvelopeClause::alignment, EnvelopeClause::lse};
const char* clause_name(EnvelopeClause c);

struct SupportEnvelope {
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  int64_t max_head_dim = kUnbounded;
  int64_t head_dim_multiple = 1;
  bool distinct_head_dims = true;
  bool grouped_heads = true;
  int64_t min_seq_kv = 1, max_seq = kUnbounded;
  int64_t max_batch_heads = kUnbounded;
  bool softcap = true;
  bool bias = false;
  bool bias_grad = false;
  bool ragged = false;
  // Not a clause: whether the backward takes dLSE (Backend::backward_takes_dlse). The composition
  // engine adds dLSE's term to dQ and dK for a backend that ignores it, but cannot to dBias (it
  // needs P itself), so the generators aim no case with both dBias and a dLSE at such a backend.
  bool dlse = true;
  MaskSupport masks = MaskSupport::any;
  int64_t alignment_bytes = 1;
  bool packed_lse = false;
  uint32_t library_decides = 0;  // bit (1 << clause): the library has the last word there

  bool takes(DType d) const;
  // The bias clauses never are: a library the harness hands no bias (or asks no dBias) cannot judge
  // a call that has one.
  static constexpr bool always_enforced(EnvelopeClause c) {
    return c == EnvelopeClause::bias || c == EnvelopeClause::bias_grad || c == EnvelopeClause::ragged;
  }
  bool decided_by_library(EnvelopeClause c) const { return !always_enforced(c) && (library_decides & bit(c)); }
  static constexpr uint32_t bit(EnvelopeClause c) { return uint32_t{1} << static_cast<int>(c); }
  // Every clause but these (and the bias clauses, which never are) is left to the library.
  static uint32_t library_decides_all_but(std::initializer_list<EnvelopeClause> enforced);
  // Whether the clause restricts anything (an unrestricted clause has no "just outside").
  bool restricts(EnvelopeClause c) const;
  // The first clause the call breaks, or nothing when it is inside.
  std::optional<EnvelopeClause> broken_clause(const Problem& p) const;
  // Why the call breaks the clause (one line), or nothing when it holds.
  std::optional<std::string> breach(const Problem& p, EnvelopeClause c) const;
  // The first enforced clause the call breaks, said in one line: the backend's refusal. Nothing
  // when every enforced clause holds (library-decided ones are then the library's to judge).
  std::optional<std::string> refusal(const Problem& p) const;
  bool operator==(const SupportEnvelope&) const = default;
};

// What the dense mask of a call looks like, for the mask clause and for the adapters that pass
// is_causal instead of a mask: all visible, causal with the diagonal aligned `a` (key j visible to
// query i iff j <= i top-left, j <= i + Lkv - Lq bottom-right), both (a 1 x 1 call) or neither.
// Read inside each sequence's block: the whole call for a dense batch, the call's
// call_len_q(b) x call_len_kv(b) rows and keys of each sequence for a ragged one (outside them
// nothing is visible by construction, harness/problem.h). The scan stops once it is neither.
// `padded`: the whole padded call instead, for backends that take the dense tensors padded and
// see the lengths only through the mask (a ragged batch's padding is then masked, so its mask is
// neither unless every sequence has the padded lengths).
struct MaskShape {
  bool all = true, causal = true;
};
enum class MaskExtent { sequences, padded };
MaskShape mask_shape(const Problem& p, Align a, MaskExtent extent = MaskExtent::sequences);

// For summaries, `attnfuzz list` and the worker protocol.
nlohmann::json to_json(const SupportEnvelope& e);
// A key left out is unrestricted (its default); an unknown key throws, as a bad value does
// (std::invalid_argument). Plugins declare theirs this way (backends/attnfuzz_plugin.h).
SupportEnvelope envelope_from_json(const nlohmann::json& j);
// What user code (a plugin, a Python adapter) declares it accepts: its envelope JSON, or none
// (null: unrestricted), narrowed to the dtypes it has a contract for. That clause is enforced;
// the code's own supports() has the last word on every other. Throws std::invalid_argument when
// the JSON is malformed or no declared dtype has a contract.
SupportEnvelope declared_envelope(const nlohmann::json* declared, const std::vector<DType>& contract_dtypes);
std::string describe(const SupportEnvelope& e);                // one line: only the restricting clauses

// How a generated case was aimed (generators/envelope_cases.h): at no backend in particular,
// inside one backend's envelope, or just outside one clause of it.
enum class CaseAim { blind, inside, edge };
const char* aim_name(CaseAim a);

struct AimedCase {
  Case c;
  std::string target;                     // the backend it was aimed at; empty when blind
  CaseAim aim = CaseAim::blind;
  std::optional<EnvelopeClause> outside;  // edge: the one clause it breaks
};

}  // namespace attnfuzz
