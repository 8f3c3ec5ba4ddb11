#pragma once
// Packed sequences for LibTorch's ragged-batch entry points (backends/torch_varlen_cuda.cpp: the
// varlen ops; backends/torch_nested.cpp: nested tensors): which rows and keys each sequence has
// in a call, the mask an entry point computes per sequence and whether the dense mask is that,
// and a dense [B][H][S][D] tensor moved to and from a packed [rows][H][D] buffer with the case's
// gaps, tail and misalignment (harness/case.h, Ragged). Included only by those .cpp files.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "harness/compose.h"
#include "harness/errors.h"
#include "oracles/torch_common.h"

namespace attnfuzz::torch_detail {

// The mask an op computes for every sequence (the same for every head).
struct OpMask {
  enum class Kind { none, causal_bottom_right, causal_top_left, window } kind = Kind::none;
  int64_t left = -1, right = -1;  // window: reach on either side of the bottom-right diagonal
};

inline bool op_sees(const OpMask& m, int64_t i, int64_t j, int64_t lq, int64_t lk) {
  switch (m.kind) {
    case OpMask::Kind::none:
      return true;
    case OpMask::Kind::causal_bottom_right:
      return j <= i + lk - lq;
    case OpMask::Kind::causal_top_left:
      return j <= i;
    case OpMask::Kind::window: {
      const int64_t d = j - (i + lk - lq);
      return (m.left < 0 || d >= -m.left) && (m.right < 0 || d <= m.right);
    }
  }
  return false;
}

// Sequence b's rows and keys in this call.
struct CallLens {
  std::vector<int64_t> q, kv;
  bool operator==(const CallLens&) const = default;
};

inline CallLens call_lens(const Problem& p) {
  CallLens l;
  for (int64_t b = 0; b < p.shape.batch; ++b) {
    l.q.push_back(p.call_len_q(b));
    l.kv.push_back(p.call_len_kv(b));
  }
  return l;
}

// Whether the dense mask is m inside every sequence's block, for every head, and invisible outside.
inline bool dense_mask_is(const Problem& p, const CallLens& l, const OpMask& m) {
  const Shape& s = p.shape;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t lq = l.q[static_cast<size_t>(b)], lk = l.kv[static_cast<size_t>(b)];
    for (int64_t h = 0; h < s.heads_q; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const uint8_t* row = p.mask.data() + static_cast<size_t>(((b * s.heads_q + h) * s.seq_q + i) * s.seq_kv);
        for (int64_t j = 0; j < s.seq_kv; ++j) {
          const bool expected = i < lq && j < lk && op_sees(m, i, j, lq, lk);
          if ((row[j] != 0) != expected) return false;
        }
      }
  }
  return true;
}

// The mask `fit` finds for this call (fit(p, call_lens(p)): a scan of the dense mask), or nothing.
// Every call of a case (the support check, forward, backward, the dLSE term's calls) asks about
// the same mask: at real size the last large answer of each `who` (a string literal: compared by
// address) is kept, and a repeated mask costs a memory comparison, not the scan.
template <class Fit>
std::optional<OpMask> remembered_fit(const char* who, const Problem& p, Fit&& fit) {
  const CallLens l = call_lens(p);
  struct Last {
    const char* who = nullptr;
    Shape shape;
    CallLens lens;
    std::vector<uint8_t> mask;
    std::optional<OpMask> fit;
  };
  thread_local Last last;
  const bool large = p.mask.size() >= (size_t{1} << 16);
  if (large && last.who == who && last.shape == p.shape && last.lens == l && last.mask == p.mask) return last.fit;
  std::optional<OpMask> found = fit(p, l);
  if (large) last = {who, p.shape, l, p.mask, found};
  return found;
}

// Where each sequence's rows lie in a packed buffer, and the index maps between it and the dense
// [B * S] rows.
struct PackedRows {
  std::vector<int64_t> starts;  // B + 1: each sequence's first row, then the end of the last one
  int64_t total = 0;            // the buffer's rows: the sequences, their gaps, the tail
  int64_t longest = 0;
  std::vector<int64_t> b_of, i_of;     // per real token (host)
  at::Tensor dense_rows, packed_rows;  // per real token, int64 on the device: b * S + i, starts[b] + i
};

inline at::Tensor long_tensor(const std::vector<int64_t>& v, at::Device dev) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
  if (!v.empty()) std::memcpy(t.data_ptr<int64_t>(), v.data(), v.size() * sizeof(int64_t));
  return t.to(dev);
}

inline at::Tensor int_tensor(const std::vector<int64_t>& v, at::Device dev) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kInt);
  int32_t* d = t.data_ptr<int32_t>();
  for (size_t i = 0; i < v.size(); ++i) d[i] = static_cast<int32_t>(v[i]);
  return t.to(dev);
}

// Rows of a buffer laid out so (before the index tensors exist): host only.
inline int64_t packed_rows_of(const std::vector<int64_t>& lens, int64_t gap, int64_t tail) {
  int64_t at = 0;
  for (size_t b = 0; b < lens.size(); ++b) at += lens[b] + (b + 1 < lens.size() ? gap : 0);
  return at + tail;
}

// The maximum length an op is told: the longest of the call, at least 1, plus the case's slack.
inline int64_t declared_max(int64_t longest, int64_t max_slack) { return std::max<int64_t>(1, longest) + max_slack; }

inline PackedRows plan_packing(int64_t seq, const std::vector<int64_t>& lens, int64_t gap, int64_t tail, at::Device dev) {
  const size_t batch = lens.size();
  PackedRows k;
  k.starts.assign(batch + 1, 0);
  std::vector<int64_t> dense, packed;
  int64_t at = 0;
  for (size_t b = 0; b < batch; ++b) {
    k.starts[b] = at;
    for (int64_t i = 0; i < lens[b]; ++i) {
      dense.push_back(static_cast<int64_t>(b) * seq + i);
      packed.push_back(at + i);
      k.b_of.push_back(static_cast<int64_t>(b));
      k.i_of.push_back(i);
    }
    k.longest = std::max(k.longest, lens[b]);
    at += lens[b];
    if (b + 1 < batch) at += gap;
  }
  k.starts[batch] = at;
  k.total = at + tail;
  k.dense_rows = long_tensor(dense, dev);
  k.packed_rows = long_tensor(packed, dev);
  return k;
}

// A dense [B][H][S][D] tensor as a packed [total][H][d_pad] buffer in `st` on `dev`: the real rows
// at their offsets (D padded to d_pad with zero columns), NaN in every other row. misaligned
// (Ragged::misaligned): the buffer a view that starts one element into a larger allocation.
inline at::Tensor pack(const Tensor& dense, int64_t d_pad, const PackedRows& k, at::ScalarType st, at::Device dev, bool misaligned) {
  const int64_t batch = dense.dim(0), heads = dense.dim(1), seq = dense.dim(2), d = dense.dim(3);
  at::Tensor rows = to_torch(dense, st, dev).permute({0, 2, 1, 3}).reshape({batch * seq, heads, d});
  if (d_pad > d) rows = at::constant_pad_nd(rows, {0, d_pad - d});
  const int64_t n = k.total * heads * d_pad, skip = misaligned ? 1 : 0;
  at::Tensor out = at::full({n + skip}, std::numeric_limits<double>::quiet_NaN(), rows.options()).narrow(0, skip, n).view({k.total, heads, d_pad});
  out.index_copy_(0, k.packed_rows, rows.index_select(0, k.dense_rows));
  return out;
}

// The real rows of a packed [total][H][>= d] buffer as a dense [B][H][S][d] tensor, zero elsewhere.
inline Tensor unpack(const at::Tensor& packed, int64_t d, const PackedRows& k, int64_t batch, int64_t seq) {
  const int64_t heads = packed.size(1);
  at::Tensor dense = at::zeros({batch * seq, heads, d}, packed.options());
  dense.index_copy_(0, k.dense_rows, packed.narrow(2, 0, d).index_select(0, k.packed_rows));
  return from_torch(dense.view({batch, seq, heads, d}).permute({0, 2, 1, 3}));
}

// The LSE rows `source_rows` of `rows` ([N][H], one per real token in PackedRows order) as a dense
// [B][H][S] tensor, -inf elsewhere.
inline Tensor unpack_lse(const at::Tensor& rows, const at::Tensor& source_rows, const PackedRows& k, int64_t batch, int64_t seq) {
  const int64_t heads = rows.size(1);
  at::Tensor dense = at::full({batch * seq, heads}, -std::numeric_limits<double>::infinity(), rows.options());
  dense.index_copy_(0, k.dense_rows, rows.index_select(0, source_rows));
  return from_torch(dense.view({batch, seq, heads}).permute({0, 2, 1}));
}

inline std::string sizes_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// A library call whose argument checks (TORCH_CHECK) raise a plain c10::Error: a clean refusal,
// so the call is declined with LibTorch's message (UnsupportedError, "<who>: LibTorch's <op>
// refused the call: ..."). A CUDA error (c10::AcceleratorError, or a message naming one), a
// device or host out of memory are not refusals: they pass on, to be errors.
template <class F>
auto library_call(const std::string& who, const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::AcceleratorError&) {
    throw;
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error& e) {
    std::string m = e.what_without_backtrace();
    if (host_out_of_memory(e) || m.find("CUDA error") != std::string::npos || m.find("CUDA kernel") != std::string::npos) throw;
    m = m.substr(0, m.find('\n'));
    throw UnsupportedError(who + ": LibTorch's " + op + " refused the call: " + message_safe(m, 300));
  }
}

}  // namespace attnfuzz::torch_detail
