#pragma once
// The project's fused attention kernels (kernels/flash/), behind a plain C++ interface: no
// CUDA header reaches the code that includes this. All pointers are device pointers; every
// call is asynchronous on the given stream (nullptr: the default stream).
//
//   forward:  S = scale Q K^T (softcap: c tanh(S / c)), masked -> -inf,
//             LSE = log sum_j exp S_ij (natural log, fp32; -inf on a row with no visible key),
//             O = exp(S - LSE) V (0 on such a row)
//   backward: D = rowsum(dO * O) - dLSE,  P = exp(S - LSE),  dS = P (dP - D) [(1 - tanh^2)],
//             dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO   (dK, dV summed over the group)
//
// Tensors are [B][H][S][D] with any batch, head and row strides (elements) and a contiguous
// head dim; the pointer is element (0, 0, 0, 0). The kernels load 16 bytes at a time, so every
// pointer and stride must be a multiple of 8 elements (aligned_for_kernels says whether).
// A ragged batch and a paged K/V cache are described by Ragged and Pages below.
// Head dims: the kernels are instantiated for 64 and 128 (Dqk = Dv = head_dim); a caller
// with a smaller dim pads Q, K, V with zeros up to it (zero columns change no score, and the
// padded columns of O, dQ, dK, dV are dropped).
#include <cstdint>

namespace attnfuzz::flash {

enum class Elem { f16, bf16 };

struct Strides {
  int64_t batch = 0, head = 0, row = 0;  // elements
};

// Which (query i, key j) pairs are visible. Two ways, one per call:
//  - a band, computed in the kernel: visible iff j - i - diagonal lies in [-left, right]
//    (-1: that side unbounded). No mask: left = right = -1. Causal top-left: right = 0;
//    bottom-right: diagonal = Skv - Sq.
//  - a dense mask [planes][Sq][Skv] (1 = visible; planes = B * Hq, or one shared plane),
//    with its tile classes (classify_tiles) for the kernels' tile shape: empty tiles are
//    skipped, full tiles run unmasked, and only partial tiles read the dense mask.
struct Mask {
  int64_t left = -1, right = -1, diagonal = 0;
  const int64_t* diagonals = nullptr;  // [B] or nullptr: batch entry b's band diagonal instead of `diagonal`
  const uint8_t* dense = nullptr;
  bool one_plane = true;
  const uint8_t* tiles_fwd = nullptr;  // classes for forward_tile()
  const uint8_t* tiles_bwd = nullptr;  // classes for backward_tile()
};

enum : uint8_t { kTileEmpty = 0, kTilePartial = 1, kTileFull = 2 };

struct TileShape {
  int q, kv;
};
TileShape forward_tile(int head_dim);
TileShape backward_tile(int head_dim);

// A ragged batch (varlen), the packed layout of FlashAttention's varlen interface: batch entry b
// has lens_q[b] queries and lens_kv[b] keys (seq_q and seq_kv bound them: they size the grid), and
// its rows start at row starts_q[b] (starts_kv[b]) of every tensor of its side:
//   query side (Q, O, LSE, dO, dLSE, dQ): element (b, h, i) at b batch + h head + (starts_q[b] + i) row
//   key side (K, V, dK, dV):             element (b, h, j) at b batch + h head + (starts_kv[b] + j) row
// (a packed [tokens][H][D] tensor has batch stride 0). Rows between and after the sequences are
// neither read nor written; a query past lens_q[b] or a key past lens_kv[b] does not exist. The
// mask is then a band (Mask::dense is refused), per batch entry through Mask::diagonals.
// All four arrays are device int32 arrays; none given (lens_q nullptr): a dense batch.
struct Ragged {
  const int32_t *starts_q = nullptr, *starts_kv = nullptr;
  const int32_t *lens_q = nullptr, *lens_kv = nullptr;
};

// A paged K/V cache (the forward only; a ragged batch: Ragged::lens_kv gives each sequence's
// keys, starts_kv is not read): key j of batch entry b is row j % page_size of physical page
// table[b * table_stride + j / page_size], element (page, h, row) of K and V at page batch +
// h head + row row of their strides (a page takes a batch entry's place). Pages past a sequence's
// last key, and rows of its last page past it, are never read.
struct Pages {
  const int32_t* table = nullptr;  // device int32 array; nullptr: K and V are not paged
  int64_t table_stride = 0, page_size = 0;
};

struct Problem {
  Elem elem = Elem::bf16;
  int head_dim = 128;
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_kv = 1;  // ragged: seq_q, seq_kv bound the lengths
  float scale = 1.f;
  float softcap = 0.f;  // 0: none
  Mask mask;
  Ragged ragged;
  Pages pages;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  Strides q_strides, k_strides, v_strides;
  void* stream = nullptr;  // cudaStream_t
};

struct ForwardArgs {
  void* o = nullptr;
  Strides o_strides;
  float* lse = nullptr;  // [B][Hq][Sq] with lse_strides (row: the stride of S)
  Strides lse_strides;
};

struct BackwardArgs {
  const void* o = nullptr;  // the forward's output (for D)
  Strides o_strides;
  const float* lse = nullptr;
  Strides lse_strides;
  const void* d_out = nullptr;
  Strides d_out_strides;
  const float* d_lse = nullptr;  // nullptr: dLSE = 0
  Strides d_lse_strides;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  Strides dq_strides, dk_strides, dv_strides;
  // Scratch of backward_workspace_bytes(p) bytes (per-row LSE and D in fp32).
  void* workspace = nullptr;
};

// Whether this build has kernels for the element type and head dim: 64 and 128, fp16 and bf16
// (a planted-bug build, ATTNFUZZ_FLASH_PLANTED_BUILD, only bf16).
bool instantiated(Elem e, int head_dim);
// Whether the kernels can run the problem (head dim, heads, alignment, a ragged batch's mask), or
// why not. The backward refuses a paged problem (backward()).
bool supported(const Problem& p, const char** why);
bool aligned_for_kernels(const void* ptr, const Strides& s);
size_t backward_workspace_bytes(const Problem& p);

// Throws std::runtime_error on a launch error.
void forward(const Problem& p, const ForwardArgs& a);
// Deterministic: no atomics (one kernel gives dK and dV per key tile, another dQ per query tile).
void backward(const Problem& p, const BackwardArgs& a);

// The fused LSE merge of n partial results over disjoint key sets (DESIGN.md, "Merging"):
//   L = logsumexp_k L_k,  w_k = exp(L_k - L) (0 when L_k = -inf),  O = sum_k w_k O_k
//   backward: dO_k = w_k dO,  dL_k = w_k (rowsum(dO O_k) - rowsum(dO O) + dL)
// Rows are contiguous [rows][dim] fp32 arrays; parts are laid out one after another
// ([n][rows][dim], [n][rows]). A row where every L_k = -inf gets L = -inf, O = 0 and zero
// gradients.
void merge_forward(int n, int64_t rows, int64_t dim, const float* o_parts, const float* lse_parts, float* o, float* lse,
                   void* stream = nullptr);
void merge_backward(int n, int64_t rows, int64_t dim, const float* o_parts, const float* lse_parts, const float* o, const float* lse,
                    const float* d_out, const float* d_lse, float* d_o_parts, float* d_lse_parts, void* stream = nullptr);

}  // namespace attnfuzz::flash
