#pragma once
// The mask algebra (FlexAttention's mask_mod, as data): leaves that say whether
// query q may see key kv, combined with and / or / not. A mask is evaluated in
// the coordinates of the whole problem (Sq x Skv), so a composition that cuts the
// problem into pieces evaluates the same expression at shifted indices.
#include <cstdint>
#include <string>
#include <vector>

namespace attnfuzz {

enum class Align { top_left, bottom_right };

struct MaskExpr {
  enum class Kind { all, causal, sliding_window, document, prefix_lm, block_sparse, random, and_, or_, not_ };
  Kind kind = Kind::all;
  // causal, sliding_window, prefix_lm: bottom_right shifts the diagonal by Skv - Sq.
  Align align = Align::top_left;
  // sliding_window: kv visible iff q' - left <= kv <= q' + right (q' the aligned q); -1 = unbounded.
  int64_t left = -1, right = 0;
  // document: segment lengths, the same count for queries and keys; segment i of the
  // queries sees only segment i of the keys. A zero-length segment models an empty
  // sequence in a varlen batch.
  std::vector<int64_t> segments_q, segments_kv;
  // prefix_lm: keys [0, prefix) are visible to every query, the rest causally.
  int64_t prefix = 0;
  // block_sparse: tiles of block_q x block_kv, rows[i][j] == '1' when tile (i, j) is visible.
  int64_t block_q = 0, block_kv = 0;
  std::vector<std::string> rows;
  // random: each (b, h, q, kv) visible with probability density, drawn from seed.
  double density = 1.0;
  uint64_t seed = 0;
  std::vector<MaskExpr> args;  // and_, or_ (>= 1), not_ (exactly 1)

  bool operator==(const MaskExpr&) const = default;

  static MaskExpr all_visible() { return {}; }
  static MaskExpr causal_mask(Align a) {
    MaskExpr m;
    m.kind = Kind::causal;
    m.align = a;
    return m;
  }
  static MaskExpr window(int64_t left, int64_t right, Align a) {
    MaskExpr m;
    m.kind = Kind::sliding_window;
    m.left = left;
    m.right = right;
    m.align = a;
    return m;
  }
  static MaskExpr op(Kind k, std::vector<MaskExpr> args) {
    MaskExpr m;
    m.kind = k;
    m.args = std::move(args);
    return m;
  }
};

std::string to_string(MaskExpr::Kind k);
// A short human label ("causal_br & window(8,0)") used in tables and signatures.
std::string describe(const MaskExpr& m);
// The kind that names a mask in a divergence signature: the leaf kind, or the
// outermost combinator.
std::string signature_kind(const MaskExpr& m);

// Whether kv is inside the band q' - left <= kv <= q' + right, given d = kv - q' (-1 = unbounded
// side). Written on the difference so that no window, however large, overflows: a window of
// 2^63 - 1 keys sees every key.
inline bool in_window(int64_t d, int64_t left, int64_t right) { return (left < 0 || d >= -left) && (right < 0 || d <= right); }

// The size of an expression: its nodes plus its document segments (each segment costs a
// step of every evaluation), and its depth (a leaf is 1). Bounded by validate (case.h).
uint64_t mask_size(const MaskExpr& m);
int mask_depth(const MaskExpr& m);

// Throws CaseError naming `field` when the expression cannot apply to a problem of Sq x Skv.
void validate_mask(const MaskExpr& m, int64_t sq, int64_t skv, const std::string& field);

// Whether query q may attend to key kv in batch b, query head h.
bool visible(const MaskExpr& m, int64_t b, int64_t h, int64_t q, int64_t kv, int64_t sq, int64_t skv);
// Whether visible() can differ between (b, h): only a random leaf depends on them.
bool varies_by_head(const MaskExpr& m);

enum class TileClass { fully_masked, fully_visible, partial };
// Classifies the tile [q0, q1) x [k0, k1) of batch b, head h. Structured leaves
// answer from their geometry; random and block-sparse leaves are checked
// exhaustively, so the answer is always exact.
TileClass classify_tile(const MaskExpr& m, int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0, int64_t k1, int64_t sq, int64_t skv);

}  // namespace attnfuzz
