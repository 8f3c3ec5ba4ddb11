#include "harness/envelope.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <type_traits>

#include "harness/layout.h"
#include "harness/problem.h"

namespace attnfuzz {

using json = nlohmann::json;

const char* clause_name(EnvelopeClause c) {
  switch (c) {
    case EnvelopeClause::dtype: return "dtype";
    case EnvelopeClause::head_dim: return "head_dim";
    case EnvelopeClause::head_dims: return "head_dims";
    case EnvelopeClause::gqa: return "gqa";
    case EnvelopeClause::seq: return "seq";
    case EnvelopeClause::grid: return "grid";
    case EnvelopeClause::softcap: return "softcap";
    case EnvelopeClause::bias: return "bias";
    case EnvelopeClause::bias_grad: return "bias_grad";
    case EnvelopeClause::ragged: return "ragged";
    case EnvelopeClause::mask: return "mask";
    case EnvelopeClause::alignment: return "alignment";
    case EnvelopeClause::lse: return "lse";
  }
  return "?";
}

const char* aim_name(CaseAim a) { return a == CaseAim::blind ? "blind" : a == CaseAim::inside ? "inside" : "edge"; }

namespace {

int64_t element_bytes(DType d) { return d == DType::f32 ? 4 : 2; }

constexpr TensorId kStridedRoles[] = {TensorId::Q,   TensorId::K,   TensorId::V,   TensorId::dO,
                                        TensorId::O,   TensorId::dQ, TensorId::dK, TensorId::dV};

// The first strided tensor whose base or a stride (in bytes) is off the alignment, or nothing.
std::optional<std::string> misaligned(const Problem& p, int64_t align) {
  if (align <= 1) return std::nullopt;
  const int64_t e = element_bytes(p.dtype);
  for (TensorId r : kStridedRoles) {
    const Placement pl = place(p.layouts, r, p.shape);
    if ((pl.offset * e) % align != 0)
      return std::string(case_key(r)) + " starts " + std::to_string((pl.offset * e) % align) + " bytes past " + std::to_string(align) +
             "-byte alignment";
    for (int d = 0; d < 3; ++d)
      if (pl.sizes[static_cast<size_t>(d)] > 1 && (pl.strides[static_cast<size_t>(d)] * e) % align != 0)
        return std::string(case_key(r)) + " has a stride of " + std::to_string(pl.strides[static_cast<size_t>(d)] * e) +
               " bytes, not a multiple of " + std::to_string(align);
  }
  return std::nullopt;
}

bool lse_packed(const Problem& p) {
  const Placement pl = place(p.layouts, TensorId::LSE, p.shape);
  const Shape& s = p.shape;
  return pl.offset == p.layouts.surround.guard && pl.strides[2] == 1 && pl.strides[1] == s.seq_q && pl.strides[0] == s.heads_q * s.seq_q;
}

std::string dtype_list(const std::vector<DType>& ds) {
  std::string out;
  for (DType d : ds) out += (out.empty() ? "" : "/") + std::string(to_string(d));
  return out.empty() ? "none" : out;
}

}  // namespace

MaskShape mask_shape(const Problem& p, Align a, MaskExtent extent) {
  const Shape& s = p.shape;
  const bool by_sequence = p.ragged() && extent == MaskExtent::sequences;
  MaskShape m;
  for (int64_t b = 0; b < s.batch && (m.all || m.causal); ++b) {
    const int64_t lq = by_sequence ? p.call_len_q(b) : s.seq_q, lkv = by_sequence ? p.call_len_kv(b) : s.seq_kv;
    const int64_t diagonal = a == Align::bottom_right ? lkv - lq : 0;
    for (int64_t h = 0; h < s.heads_q && (m.all || m.causal); ++h)
      for (int64_t i = 0; i < lq && (m.all || m.causal); ++i) {
        const uint8_t* row = p.mask.data() + static_cast<size_t>(((b * s.heads_q + h) * s.seq_q + i) * s.seq_kv);
        for (int64_t j = 0; j < lkv; ++j) {
          const bool v = row[j] != 0;
          m.all = m.all && v;
          m.causal = m.causal && v == (j <= i + diagonal);
        }
      }
  }
  return m;
}

bool SupportEnvelope::takes(DType d) const { return std::find(dtypes.begin(), dtypes.end(), d) != dtypes.end(); }

bool SupportEnvelope::restricts(EnvelopeClause c) const {
  switch (c) {
    case EnvelopeClause::dtype: return dtypes.size() < 3;
    case EnvelopeClause::head_dim: return max_head_dim != kUnbounded || head_dim_multiple > 1;
    case EnvelopeClause::head_dims: return !distinct_head_dims;
    case EnvelopeClause::gqa: return !grouped_heads;
    case EnvelopeClause::seq: return min_seq_kv > 1 || max_seq != kUnbounded;
    case EnvelopeClause::grid: return max_batch_heads != kUnbounded;
    case EnvelopeClause::softcap: return !softcap;
    case EnvelopeClause::bias: return !bias;
    case EnvelopeClause::bias_grad: return !bias_grad;
    case EnvelopeClause::ragged: return !ragged;
    case EnvelopeClause::mask: return masks != MaskSupport::any;
    case EnvelopeClause::alignment: return alignment_bytes > 1;
    case EnvelopeClause::lse: return packed_lse;
  }
  return false;
}

uint32_t SupportEnvelope::library_decides_all_but(std::initializer_list<EnvelopeClause> enforced) {
  uint32_t bits = 0;
  for (EnvelopeClause c : kAllEnvelopeClauses) bits |= bit(c);
  for (EnvelopeClause c : enforced) bits &= ~bit(c);
  // Never the always-enforced clauses (decided_by_library): a bit set there would be lost by to_json.
  return bits & ~bit(EnvelopeClause::bias) & ~bit(EnvelopeClause::bias_grad) & ~bit(EnvelopeClause::ragged);
}

std::optional<std::string> SupportEnvelope::breach(const Problem& p, EnvelopeClause c) const {
  const Shape& s = p.shape;
  const std::string dims = "Dqk " + std::to_string(s.head_dim_qk) + ", Dv " + std::to_string(s.head_dim_v);
  switch (c) {
    case EnvelopeClause::dtype:
      if (takes(p.dtype)) return std::nullopt;
      return "dtype " + std::string(to_string(p.dtype)) + " (takes " + dtype_list(dtypes) + ")";
    case EnvelopeClause::head_dim:
      if (std::max(s.head_dim_qk, s.head_dim_v) <= max_head_dim && s.head_dim_qk % head_dim_multiple == 0 &&
          s.head_dim_v % head_dim_multiple == 0)
        return std::nullopt;
      return "head dims " + dims + " (takes multiples of " + std::to_string(head_dim_multiple) +
             (max_head_dim == kUnbounded ? std::string() : " up to " + std::to_string(max_head_dim)) + ")";
    case EnvelopeClause::head_dims:
      if (distinct_head_dims || s.head_dim_qk == s.head_dim_v) return std::nullopt;
      return "head dims " + dims + " (needs Dqk == Dv)";
    case EnvelopeClause::gqa:
      if (grouped_heads || s.heads_q == s.heads_kv) return std::nullopt;
      return "grouped heads, Hq " + std::to_string(s.heads_q) + " != Hkv " + std::to_string(s.heads_kv) + " (takes Hq == Hkv)";
    case EnvelopeClause::seq:
      if (s.seq_kv >= min_seq_kv && std::max(s.seq_q, s.seq_kv) <= max_seq) return std::nullopt;
      return "lengths Sq " + std::to_string(s.seq_q) + ", Skv " + std::to_string(s.seq_kv) + " (takes Skv >= " + std::to_string(min_seq_kv) +
             (max_seq == kUnbounded ? std::string() : ", at most " + std::to_string(max_seq)) + ")";
    case EnvelopeClause::grid:
      if (s.batch <= max_batch_heads && s.heads_q <= max_batch_heads) return std::nullopt;
      return "batch and heads must each be at most " + std::to_string(max_batch_heads) + " (grid limits)";
    case EnvelopeClause::softcap:
      if (softcap || !p.softcap) return std::nullopt;
      return std::string("a softcap (takes none)");
    case EnvelopeClause::bias:
      if (bias || !p.has_bias()) return std::nullopt;
      return std::string("a score bias (takes none)");
    case EnvelopeClause::bias_grad:
      if (bias_grad || !p.bias_requires_grad) return std::nullopt;
      return std::string("a bias that requires a gradient (returns no dBias)");
    case EnvelopeClause::ragged:
      if (ragged || !p.ragged()) return std::nullopt;
      return std::string("a ragged batch (takes none)");
    case EnvelopeClause::mask:
      if (masks == MaskSupport::any) return std::nullopt;
      if (p.ragged()) {
        if (const MaskShape m = mask_shape(p, Align::bottom_right); m.all || m.causal) return std::nullopt;
        return std::string("a mask that is neither none nor causal aligned bottom-right in every sequence (takes no other)");
      }
      if (const MaskShape m = mask_shape(p, Align::top_left); m.all || (m.causal && s.seq_q == s.seq_kv)) return std::nullopt;
      return std::string("a mask that is neither none nor causal with Sq == Skv (takes no other)");
    case EnvelopeClause::alignment:
      if (auto why = misaligned(p, alignment_bytes)) return "alignment: " + *why;
      return std::nullopt;
    case EnvelopeClause::lse:
      if (!packed_lse || lse_packed(p)) return std::nullopt;
      return std::string("an LSE laid out other than packed [B][H][S]");
  }
  return std::nullopt;
}

std::optional<EnvelopeClause> SupportEnvelope::broken_clause(const Problem& p) const {
  for (EnvelopeClause c : kAllEnvelopeClauses)
    if (restricts(c) && breach(p, c)) return c;
  return std::nullopt;
}

std::optional<std::string> SupportEnvelope::refusal(const Problem& p) const {
  for (EnvelopeClause c : kAllEnvelopeClauses)
    if (restricts(c) && !decided_by_library(c))
      if (auto why = breach(p, c)) return why;
  return std::nullopt;
}

json to_json(const SupportEnvelope& e) {
  json library = json::array();
  for (EnvelopeClause c : kAllEnvelopeClauses)
    if (e.decided_by_library(c)) library.push_back(clause_name(c));
  json dtypes = json::array();
  for (DType d : e.dtypes) dtypes.push_back(std::string(to_string(d)));
  auto bound = [](int64_t v) { return v == SupportEnvelope::kUnbounded ? json(nullptr) : json(v); };
  return json{{"dtypes", dtypes},
              {"max_head_dim", bound(e.max_head_dim)},
              {"head_dim_multiple", e.head_dim_multiple},
              {"distinct_head_dims", e.distinct_head_dims},
              {"grouped_heads", e.grouped_heads},
              {"min_seq_kv", e.min_seq_kv},
              {"max_seq", bound(e.max_seq)},
              {"max_batch_heads", bound(e.max_batch_heads)},
              {"softcap", e.softcap},
              {"bias", e.bias},
              {"bias_grad", e.bias_grad},
              {"ragged", e.ragged},
              {"dlse", e.dlse},
              {"masks", e.masks == MaskSupport::any ? "any" : "causal_or_none"},
              {"alignment_bytes", e.alignment_bytes},
              {"packed_lse", e.packed_lse},
              {"library_decides", library}};
}

SupportEnvelope envelope_from_json(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("envelope: expected an object");
  static const char* const kKeys[] = {"dtypes",          "max_head_dim", "head_dim_multiple", "distinct_head_dims", "grouped_heads",
                                      "min_seq_kv",      "max_seq",      "max_batch_heads",   "softcap",            "bias",              "bias_grad",         "ragged",            "dlse",              "masks",
                                      "alignment_bytes", "packed_lse",   "library_decides"};
  for (const auto& item : j.items())
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return item.key() == k; }) == std::end(kKeys))
      throw std::invalid_argument("envelope: unknown key '" + item.key() + "'");
  SupportEnvelope e;  // a key left out keeps its default: unrestricted, but for the bias (none)
  try {
    if (j.contains("dtypes")) {
      e.dtypes.clear();
      for (const auto& d : j.at("dtypes")) e.dtypes.push_back(dtype_from_string(d.get<std::string>()));
      if (e.dtypes.empty()) throw std::invalid_argument("envelope: dtypes is empty");
    }
    auto bound = [&](const char* k, int64_t& out) {
      if (!j.contains(k)) return;
      const json& v = j.at(k);
      out = v.is_null() ? SupportEnvelope::kUnbounded : v.get<int64_t>();
    };
    auto get = [&](const char* k, auto& out) {
      if (j.contains(k)) out = j.at(k).get<std::decay_t<decltype(out)>>();
    };
    bound("max_head_dim", e.max_head_dim);
    get("head_dim_multiple", e.head_dim_multiple);
    get("distinct_head_dims", e.distinct_head_dims);
    get("grouped_heads", e.grouped_heads);
    get("min_seq_kv", e.min_seq_kv);
    bound("max_seq", e.max_seq);
    bound("max_batch_heads", e.max_batch_heads);
    get("softcap", e.softcap);
    get("bias", e.bias);
    get("bias_grad", e.bias_grad);
    get("ragged", e.ragged);
    get("dlse", e.dlse);
    if (j.contains("masks")) {
      const std::string masks = j.at("masks").get<std::string>();
      if (masks != "any" && masks != "causal_or_none") throw std::invalid_argument("envelope: masks: '" + masks + "'");
      e.masks = masks == "any" ? MaskSupport::any : MaskSupport::causal_or_none;
    }
    get("alignment_bytes", e.alignment_bytes);
    get("packed_lse", e.packed_lse);
    if (j.contains("library_decides"))
      for (const auto& name : j.at("library_decides")) {
        const std::string n = name.get<std::string>();
        bool known = false;
        for (EnvelopeClause c : kAllEnvelopeClauses)
          if (n == clause_name(c)) e.library_decides |= SupportEnvelope::bit(c), known = true;
        if (!known) throw std::invalid_argument("envelope: library_decides: unknown clause '" + n + "'");
      }
  } catch (const json::exception& ex) {
    throw std::invalid_argument(std::string("envelope: ") + ex.what());
  }
  if (e.head_dim_multiple < 1 || e.alignment_bytes < 1 || e.min_seq_kv < 1 || e.max_head_dim < 1 || e.max_seq < 1 ||
      e.max_batch_heads < 1)
    throw std::invalid_argument("envelope: bounds must be positive");
  return e;
}

SupportEnvelope declared_envelope(const json* declared, const std::vector<DType>& contract_dtypes) {
  SupportEnvelope e = declared ? envelope_from_json(*declared) : SupportEnvelope{};
  std::vector<DType> dtypes;
  for (DType d : e.dtypes)
    if (std::find(contract_dtypes.begin(), contract_dtypes.end(), d) != contract_dtypes.end()) dtypes.push_back(d);
  if (dtypes.empty())
    throw std::invalid_argument(declared ? "the envelope names no dtype it has a contract for" : "its contracts name no dtype");
  e.dtypes = dtypes;
  e.library_decides = SupportEnvelope::library_decides_all_but({EnvelopeClause::dtype});  // and the bias clauses, which never are
  return e;
}

std::string describe(const SupportEnvelope& e) {
  std::string out = dtype_list(e.dtypes);
  auto add = [&](const std::string& s) { out += ", " + s; };
  if (e.max_head_dim != SupportEnvelope::kUnbounded) add("D <= " + std::to_string(e.max_head_dim));
  if (e.head_dim_multiple > 1) add("D % " + std::to_string(e.head_dim_multiple) + " == 0");
  if (!e.distinct_head_dims) add("Dqk == Dv");
  if (!e.grouped_heads) add("no GQA");
  if (e.min_seq_kv > 1) add("Skv >= " + std::to_string(e.min_seq_kv));
  if (e.max_seq != SupportEnvelope::kUnbounded) add("S <= " + std::to_string(e.max_seq));
  if (!e.softcap) add("no softcap");
  if (e.bias) add(e.bias_grad ? "score bias with dBias" : "score bias");
  if (e.ragged) add("ragged batches");
  if (e.masks == MaskSupport::causal_or_none) add("masks: none or causal");
  if (e.alignment_bytes > 1) add(std::to_string(e.alignment_bytes) + "-byte aligned");
  if (e.packed_lse) add("packed LSE");
  std::string library;
  for (EnvelopeClause c : kAllEnvelopeClauses)
    if (e.restricts(c) && e.decided_by_library(c)) library += (library.empty() ? "" : "/") + std::string(clause_name(c));
  if (!library.empty()) add("the library decides " + library);
  return out;
}

}  // namespace attnfuzz
