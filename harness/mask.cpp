#include "harness/mask.h"

#include <algorithm>

#include "harness/errors.h"
#include "harness/rng.h"

namespace attnfuzz {
namespace {

int64_t diagonal_offset(Align a, int64_t sq, int64_t skv) { return a == Align::bottom_right ? skv - sq : 0; }

// Index of the segment that position p falls in (segments of these lengths laid
// end to end), or -1 past the end.
int64_t segment_of(const std::vector<int64_t>& lengths, int64_t p) {
  int64_t end = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    end += lengths[i];
    if (p < end) return static_cast<int64_t>(i);
  }
  return -1;
}

// Sums segment lengths, saturating at INT64_MAX (lengths come from the case file).
int64_t saturating_sum(const std::vector<int64_t>& xs) {
  int64_t total = 0;
  for (auto x : xs) total = x > INT64_MAX - total ? INT64_MAX : total + x;
  return total;
}

constexpr uint32_t kRandomMaskStream = 0x6d61736bu;  // "mask"

bool random_visible(const MaskExpr& m, int64_t b, int64_t h, int64_t q, int64_t kv, int64_t skv) {
  // One counter per (b, h, q, kv); the heads and batches get their own high words.
  const uint64_t index = static_cast<uint64_t>(q) * static_cast<uint64_t>(skv) + static_cast<uint64_t>(kv);
  const uint64_t key = splitmix64(m.seed ^ splitmix64((static_cast<uint64_t>(b) << 32) | static_cast<uint64_t>(h)));
  return uniform01(random_words(key, kRandomMaskStream, index, 0)[0]) < m.density;
}

}  // namespace

std::string to_string(MaskExpr::Kind k) {
  switch (k) {
    case MaskExpr::Kind::all:
      return "none";
    case MaskExpr::Kind::causal:
      return "causal";
    case MaskExpr::Kind::sliding_window:
      return "sliding_window";
    case MaskExpr::Kind::document:
      return "document";
    case MaskExpr::Kind::prefix_lm:
      return "prefix_lm";
    case MaskExpr::Kind::block_sparse:
      return "block_sparse";
    case MaskExpr::Kind::random:
      return "random";
    case MaskExpr::Kind::and_:
      return "and";
    case MaskExpr::Kind::or_:
      return "or";
    case MaskExpr::Kind::not_:
      return "not";
  }
  return "?";
}

std::string describe(const MaskExpr& m) {
  const std::string al = m.align == Align::bottom_right ? "br" : "tl";
  switch (m.kind) {
    case MaskExpr::Kind::all:
      return "none";
    case MaskExpr::Kind::causal:
      return "causal_" + al;
    case MaskExpr::Kind::sliding_window:
      return "window_" + al + "(" + std::to_string(m.left) + "," + std::to_string(m.right) + ")";
    case MaskExpr::Kind::document:
      return "document(" + std::to_string(m.segments_q.size()) + ")";
    case MaskExpr::Kind::prefix_lm:
      return "prefix_lm_" + al + "(" + std::to_string(m.prefix) + ")";
    case MaskExpr::Kind::block_sparse:
      return "block_sparse(" + std::to_string(m.block_q) + "x" + std::to_string(m.block_kv) + ")";
    case MaskExpr::Kind::random:
      return "random(" + std::to_string(m.density).substr(0, 4) + ")";
    case MaskExpr::Kind::not_:
      return "!" + describe(m.args.at(0));
    case MaskExpr::Kind::and_:
    case MaskExpr::Kind::or_: {
      std::string s = "(";
      for (size_t i = 0; i < m.args.size(); ++i) {
        if (i) s += m.kind == MaskExpr::Kind::and_ ? " & " : " | ";
        s += describe(m.args[i]);
      }
      return s + ")";
    }
  }
  return "?";
}

std::string signature_kind(const MaskExpr& m) {
  if (m.kind == MaskExpr::Kind::causal) return m.align == Align::bottom_right ? "causal_br" : "causal_tl";
  return to_string(m.kind);
}

uint64_t mask_size(const MaskExpr& m) {
  uint64_t n = 1 + m.segments_q.size();
  for (const auto& a : m.args) n += mask_size(a);
  return n;
}

int mask_depth(const MaskExpr& m) {
  int d = 0;
  for (const auto& a : m.args) d = std::max(d, mask_depth(a));
  return d + 1;
}

void validate_mask(const MaskExpr& m, int64_t sq, int64_t skv, const std::string& field) {
  using K = MaskExpr::Kind;
  switch (m.kind) {
    case K::all:
    case K::causal:
      return;
    case K::sliding_window:
      if (m.left < -1 || m.right < -1) throw CaseError(field, "window bounds must be >= 0 or -1 (unbounded)");
      return;
    case K::document: {
      if (m.segments_q.empty() || m.segments_q.size() != m.segments_kv.size())
        throw CaseError(field, "segments_q and segments_kv must be non-empty and of equal count");
      for (auto v : m.segments_q)
        if (v < 0) throw CaseError(field + ".segments_q", "segment lengths must be >= 0");
      for (auto v : m.segments_kv)
        if (v < 0) throw CaseError(field + ".segments_kv", "segment lengths must be >= 0");
      const int64_t tq = saturating_sum(m.segments_q), tk = saturating_sum(m.segments_kv);
      if (tq != sq) throw CaseError(field + ".segments_q", "lengths sum to " + std::to_string(tq) + ", seq_q is " + std::to_string(sq));
      if (tk != skv) throw CaseError(field + ".segments_kv", "lengths sum to " + std::to_string(tk) + ", seq_kv is " + std::to_string(skv));
      return;
    }
    case K::prefix_lm:
      if (m.prefix < 0) throw CaseError(field + ".prefix", "must be >= 0");
      return;
    case K::block_sparse: {
      if (m.block_q <= 0 || m.block_kv <= 0) throw CaseError(field, "block_q and block_kv must be > 0");
      const int64_t nq = (sq - 1) / m.block_q + 1, nk = (skv - 1) / m.block_kv + 1;  // ceil, without overflow
      if (static_cast<int64_t>(m.rows.size()) != nq)
        throw CaseError(field + ".rows", "expected " + std::to_string(nq) + " rows of tiles, got " + std::to_string(m.rows.size()));
      for (const auto& r : m.rows) {
        if (static_cast<int64_t>(r.size()) != nk)
          throw CaseError(field + ".rows", "expected rows of " + std::to_string(nk) + " tiles, got one of " + std::to_string(r.size()));
        if (r.find_first_not_of("01") != std::string::npos) throw CaseError(field + ".rows", "rows may hold only '0' and '1'");
      }
      return;
    }
    case K::random:
      if (!(m.density >= 0.0 && m.density <= 1.0)) throw CaseError(field + ".density", "must be in [0, 1]");
      return;
    case K::not_:
      if (m.args.size() != 1) throw CaseError(field + ".args", "'not' takes exactly one argument");
      validate_mask(m.args[0], sq, skv, field + ".args[0]");
      return;
    case K::and_:
    case K::or_:
      if (m.args.empty()) throw CaseError(field + ".args", "'" + to_string(m.kind) + "' needs at least one argument");
      for (size_t i = 0; i < m.args.size(); ++i) validate_mask(m.args[i], sq, skv, field + ".args[" + std::to_string(i) + "]");
      return;
  }
}

bool varies_by_head(const MaskExpr& m) {
  if (m.kind == MaskExpr::Kind::random) return true;
  return std::any_of(m.args.begin(), m.args.end(), [](const MaskExpr& a) { return varies_by_head(a); });
}

bool visible(const MaskExpr& m, int64_t b, int64_t h, int64_t q, int64_t kv, int64_t sq, int64_t skv) {
  using K = MaskExpr::Kind;
  switch (m.kind) {
    case K::all:
      return true;
    case K::causal:
      return kv <= q + diagonal_offset(m.align, sq, skv);
    case K::sliding_window:
      return in_window(kv - (q + diagonal_offset(m.align, sq, skv)), m.left, m.right);
    case K::document: {
      const int64_t sq_id = segment_of(m.segments_q, q);
      return sq_id >= 0 && sq_id == segment_of(m.segments_kv, kv);
    }
    case K::prefix_lm:
      return kv < m.prefix || kv <= q + diagonal_offset(m.align, sq, skv);
    case K::block_sparse:
      return m.rows[q / m.block_q][kv / m.block_kv] == '1';
    case K::random:
      return random_visible(m, b, h, q, kv, skv);
    case K::not_:
      return !visible(m.args[0], b, h, q, kv, sq, skv);
    case K::and_:
      for (const auto& a : m.args)
        if (!visible(a, b, h, q, kv, sq, skv)) return false;
      return true;
    case K::or_:
      for (const auto& a : m.args)
        if (visible(a, b, h, q, kv, sq, skv)) return true;
      return false;
  }
  return false;
}

namespace {

// kv - q' over the tile spans [lo, hi]; the band leaf sees kv - q' in [-left, right].
TileClass band_class(int64_t lo, int64_t hi, int64_t left, int64_t right) {
  const bool below_ok_all = left < 0 || lo >= -left, below_ok_none = left >= 0 && hi < -left;
  const bool above_ok_all = right < 0 || hi <= right, above_ok_none = right >= 0 && lo > right;
  if (below_ok_none || above_ok_none) return TileClass::fully_masked;
  if (below_ok_all && above_ok_all) return TileClass::fully_visible;
  return TileClass::partial;
}

// Decides from geometry where it can; `partial` here means "not decided".
TileClass fast_class(const MaskExpr& m, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int64_t sq, int64_t skv) {
  using K = MaskExpr::Kind;
  const int64_t off = diagonal_offset(m.align, sq, skv);
  const int64_t lo = k0 - (q1 - 1 + off), hi = (k1 - 1) - (q0 + off);
  switch (m.kind) {
    case K::all:
      return TileClass::fully_visible;
    case K::causal:
      return band_class(lo, hi, -1, 0);
    case K::sliding_window:
      return band_class(lo, hi, m.left, m.right);
    case K::random:
      if (m.density <= 0.0) return TileClass::fully_masked;
      if (m.density >= 1.0) return TileClass::fully_visible;
      return TileClass::partial;
    case K::not_: {
      const TileClass c = fast_class(m.args[0], q0, q1, k0, k1, sq, skv);
      if (c == TileClass::fully_masked) return TileClass::fully_visible;
      if (c == TileClass::fully_visible) return TileClass::fully_masked;
      return TileClass::partial;
    }
    case K::and_:
    case K::or_: {
      const TileClass absorbing = m.kind == K::and_ ? TileClass::fully_masked : TileClass::fully_visible;
      bool all_neutral = true;
      for (const auto& a : m.args) {
        const TileClass c = fast_class(a, q0, q1, k0, k1, sq, skv);
        if (c == absorbing) return absorbing;
        if (c == TileClass::partial) all_neutral = false;
      }
      return all_neutral ? (m.kind == K::and_ ? TileClass::fully_visible : TileClass::fully_masked) : TileClass::partial;
    }
    default:
      return TileClass::partial;
  }
}

}  // namespace

TileClass classify_tile(const MaskExpr& m, int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int64_t sq, int64_t skv) {
  if (q0 >= q1 || k0 >= k1) return TileClass::fully_masked;
  const TileClass fast = fast_class(m, q0, q1, k0, k1, sq, skv);
  if (fast != TileClass::partial) return fast;
  // Geometry could not decide (or the tile really is partial): look at every element.
  bool any_visible = false, any_masked = false;
  for (int64_t q = q0; q < q1; ++q)
    for (int64_t kv = k0; kv < k1; ++kv) {
      (visible(m, b, h, q, kv, sq, skv) ? any_visible : any_masked) = true;
      if (any_visible && any_masked) return TileClass::partial;
    }
  return any_visible ? TileClass::fully_visible : TileClass::fully_masked;
}

}  // namespace attnfuzz
