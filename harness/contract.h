#pragma once
// Numerics contracts: how a backend declares it computes, per input dtype
// (docs/semantics.md, "Numerics contracts and precision fingerprints").
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/dtype.h"

namespace attnfuzz {

enum class Contract {
  fp64,  // float64 throughout
  fp32,  // fp32 operands, fp32 accumulation (strict: no TF32)
  tf32,  // fp32 inputs, every matmul operand rounded to TF32 (10 mantissa bits), fp32 accumulation
  // fp32 inputs, every matmul as three TF32 products on tensor cores (CUTLASS's 3xTF32,
  // `OpMultiplyAddFastF32`, which PyTorch's memory-efficient attention uses for fp32 on sm80+;
  // Triton's `input_precision="tf32x3"`): each operand carried as big = tf32(x) plus
  // small = tf32(x - big), about 21 mantissa bits, fp32 accumulation. Its operand unit is 2^-22,
  // four times fp32's; where products cancel (dP - D) it shows: LibTorch's efficient kernel errs
  // 2.6-3.2x its strict fp32 math path there (docs/findings/README.md).
  tf32x3,
  fp16,  // fp16 operands, fp32 accumulation, P and dS rounded to fp16 before their matmuls
  bf16,  // bf16 operands, fp32 accumulation, P and dS rounded to bf16 before their matmuls
};

std::string_view to_string(Contract c);
std::optional<Contract> contract_from_string(std::string_view s);
// Explicit mantissa bits of the matmul operands under the contract.
int operand_mantissa_bits(Contract c);
// What a well-behaved backend promises for inputs of this dtype.
Contract natural_contract(DType d);
// The contracts a fingerprint chooses between for inputs of this dtype, finest first: those a
// kernel of this dtype may declare, and for fp16 inputs bf16 too, a coarser computation no
// honest fp16 declaration covers, on the ladder so that it is named (a contract_violation, not a
// mismatch).
std::vector<Contract> fingerprint_ladder(DType d);
// The coarsest contract a kernel of this dtype may declare: bf16 for fp32 inputs (LibTorch's
// "medium" matmul precision), the dtype itself for fp16 and bf16.
Contract coarsest_declarable(DType d);
// The coarser of two contracts (fewer operand mantissa bits; b where they tie).
Contract coarser_of(Contract a, Contract b);

}  // namespace attnfuzz
