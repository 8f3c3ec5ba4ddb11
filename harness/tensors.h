#pragma once
// The tensors of one attention call, from the one table harness/tensors.def: the enum, and
// every spelling of a tensor's name (reports, the case format, the plugin ABI's flags, the
// Python bridge) looked up there rather than written out where it is used.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace attnfuzz {

enum class TensorId : uint8_t {
#define TENSOR(e, kind, report, case_key, layout, draw, abi, wire, wire_name) e,
#include "harness/tensors.def"
};

// What a tensor is to the call (the table's kind column).
enum class TensorKind : uint8_t {
  input,     // Q, K, V: the attention's operands
  upstream,  // dO, dLSE: the backward's incoming gradients
  mask,      // the dense mask, a tensor of its own only where it travels as one
  output,    // O, LSE
  gradient,  // dQ, dK, dV
};

namespace tensor_table {
struct Row {
  TensorId tensor;
  TensorKind kind;
  const char* report;
  const char* case_key;
  TensorId layout;
  uint32_t draw;
  int64_t wire;
  const char* wire_name;
};
inline constexpr Row kRows[] = {
#define TENSOR(e, kind, report, case_key, layout, draw, abi, wire, wire_name) \
  {TensorId::e, TensorKind::kind, report, case_key, TensorId::layout, draw, wire, wire_name},
#include "harness/tensors.def"
};
inline constexpr size_t kCount = std::size(kRows);
constexpr const Row& row(TensorId t) { return kRows[static_cast<size_t>(t)]; }

template <typename Pred>
constexpr size_t count_if(Pred pred) {
  size_t n = 0;
  for (const Row& r : kRows) n += pred(r) ? 1 : 0;
  return n;
}
template <size_t N, typename Pred>
constexpr std::array<TensorId, N> select(Pred pred) {
  std::array<TensorId, N> out{};
  size_t n = 0;
  for (const Row& r : kRows)
    if (pred(r)) out[n++] = r.tensor;
  return out;
}
constexpr bool is_output(const Row& r) { return r.kind == TensorKind::output || r.kind == TensorKind::gradient; }
constexpr bool has_layout(const Row& r) { return r.layout == r.tensor && r.kind != TensorKind::mask; }
}  // namespace tensor_table

inline constexpr size_t kTensorCount = tensor_table::kCount;

// Every tensor, in table order.
inline constexpr std::array<TensorId, kTensorCount> kAllTensors =
    tensor_table::select<kTensorCount>([](const tensor_table::Row&) { return true; });
// The outputs a backend is judged on (O, LSE, dQ, dK, dV, and dBias where the case asks for it),
// in report order.
inline constexpr auto kOutputs =
    tensor_table::select<tensor_table::count_if(tensor_table::is_output)>(tensor_table::is_output);
// The tensors a case lays out one by one (harness/layout.h), in the case format's order.
inline constexpr auto kLaidOutTensors =
    tensor_table::select<tensor_table::count_if(tensor_table::has_layout)>(tensor_table::has_layout);

constexpr TensorKind kind_of(TensorId t) { return tensor_table::row(t).kind; }
constexpr bool is_output(TensorId t) { return tensor_table::is_output(tensor_table::row(t)); }
// The report name: "O", "LSE", "dQ", ...
constexpr const char* name_of(TensorId t) { return tensor_table::row(t).report; }
// The same, under the name every other enum's spelling has (to_string(DType), ...).
constexpr const char* to_string(TensorId t) { return name_of(t); }
// The tensor whose layout (and placement, harness/layout.h) it has: itself, or LSE for dLSE.
constexpr TensorId layout_of(TensorId t) { return tensor_table::row(t).layout; }
// The case format's key: "q", "d_out", "lse", "d_q", ...
constexpr const char* case_key(TensorId t) { return tensor_table::row(t).case_key; }
// The input RNG's stream (harness/inputs.h); 0 for a tensor the harness does not draw.
constexpr uint32_t draw_stream(TensorId t) { return tensor_table::row(t).draw; }
// The Python bridge's code and name for it (backends/python_bridge_protocol.h).
constexpr int64_t wire_code(TensorId t) { return tensor_table::row(t).wire; }
constexpr const char* wire_name(TensorId t) { return tensor_table::row(t).wire_name; }

namespace tensor_table {
template <size_t N>
constexpr size_t index_in(const std::array<TensorId, N>& set, TensorId t) {
  size_t i = 0;
  while (i < N && set[i] != t) ++i;
  return i;
}
}  // namespace tensor_table
// Position in kOutputs, for arrays of one entry per output; t must be an output.
constexpr size_t output_index(TensorId t) { return tensor_table::index_in(kOutputs, t); }
// Position in kLaidOutTensors, for arrays of one entry per laid-out tensor; t must be one.
constexpr size_t laid_out_index(TensorId t) { return tensor_table::index_in(kLaidOutTensors, t); }

std::optional<TensorId> from_name(std::string_view report_name);
// from_name, for the outputs (kOutputs) only.
std::optional<TensorId> output_from_name(std::string_view report_name);
std::optional<TensorId> from_case_key(std::string_view key);
std::optional<TensorId> from_wire_code(int64_t code);

}  // namespace attnfuzz
