#include "harness/tensors.h"

namespace attnfuzz {

namespace {
// The table's rows agree with the enum (row i is enumerator i) and the wire codes are distinct:
// checked at compile time, so a row added out of place fails the build.
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kTensorCount; ++i)
    if (static_cast<size_t>(tensor_table::kRows[i].tensor) != i) return false;
  return true;
}
constexpr bool wire_codes_distinct() {
  for (size_t i = 0; i < kTensorCount; ++i)
    for (size_t j = i + 1; j < kTensorCount; ++j)
      if (tensor_table::kRows[i].wire == tensor_table::kRows[j].wire) return false;
  return true;
}
static_assert(rows_in_enum_order());
static_assert(wire_codes_distinct());
static_assert(kOutputs.size() == 6 && kOutputs[0] == TensorId::O && kOutputs[4] == TensorId::dV && kOutputs[5] == TensorId::dBias);

template <typename Key>
std::optional<TensorId> find(Key key) {
  for (const tensor_table::Row& r : tensor_table::kRows)
    if (key(r)) return r.tensor;
  return std::nullopt;
}
}  // namespace

std::optional<TensorId> from_name(std::string_view name) {
  return find([&](const tensor_table::Row& r) { return name == r.report; });
}
std::optional<TensorId> output_from_name(std::string_view name) {
  return find([&](const tensor_table::Row& r) { return tensor_table::is_output(r) && name == r.report; });
}
std::optional<TensorId> from_case_key(std::string_view key) {
  return find([&](const tensor_table::Row& r) { return key == r.case_key; });
}
std::optional<TensorId> from_wire_code(int64_t code) {
  return find([&](const tensor_table::Row& r) { return code == r.wire; });
}

}  // namespace attnfuzz
