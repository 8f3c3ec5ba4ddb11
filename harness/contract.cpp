#include "harness/contract.h"

namespace attnfuzz {

std::string_view to_string(Contract c) {
  switch (c) {
    case Contract::fp64:
      return "fp64";
    case Contract::fp32:
      return "fp32";
    case Contract::tf32:
      return "tf32";
    case Contract::tf32x3:
      return "tf32x3";
    case Contract::fp16:
      return "fp16";
    case Contract::bf16:
      return "bf16";
  }
  return "?";
}

std::optional<Contract> contract_from_string(std::string_view s) {
  for (Contract c : {Contract::fp64, Contract::fp32, Contract::tf32x3, Contract::tf32, Contract::fp16, Contract::bf16})
    if (to_string(c) == s) return c;
  return std::nullopt;
}

int operand_mantissa_bits(Contract c) {
  switch (c) {
    case Contract::fp64:
      return 52;
    case Contract::fp32:
      return 23;
    case Contract::tf32:
      return 10;
    case Contract::tf32x3:
      return 21;  // big's 10 explicit bits, then small's implicit one and its 10
    case Contract::fp16:
      return 10;
    case Contract::bf16:
      return 7;
  }
  return 23;
}

Contract natural_contract(DType d) {
  switch (d) {
    case DType::f32:
      return Contract::fp32;
    case DType::f16:
      return Contract::fp16;
    case DType::bf16:
      return Contract::bf16;
  }
  return Contract::fp32;
}

std::vector<Contract> fingerprint_ladder(DType d) {
  switch (d) {
    case DType::f32:
      return {Contract::fp32, Contract::tf32, Contract::bf16};
    case DType::f16:
      return {Contract::fp32, Contract::fp16, Contract::bf16};
    case DType::bf16:
      return {Contract::fp32, Contract::tf32, Contract::bf16};
  }
  return {Contract::fp32};
}

Contract coarsest_declarable(DType d) { return d == DType::f32 ? Contract::bf16 : natural_contract(d); }

Contract coarser_of(Contract a, Contract b) { return operand_mantissa_bits(a) < operand_mantissa_bits(b) ? a : b; }

}  // namespace attnfuzz
