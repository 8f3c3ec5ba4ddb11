// The GPU mutant zoo: cuda.flash (backends/flash_backends.cpp) built with one planted bug
// (tests/mutants/flash_planted.cuh, which lists them; ATTNFUZZ_FLASH_MUTANT), behind the plugin
// C ABI, so that a GPU campaign shows the harness finds each, at the sizes where each fires.
// A host-memory plugin: it reads the strided host tensors into a Problem and runs the
// backend, which does its own device work. bf16 only (head dims up to 128): the planted-bug
// build compiles no fp16 kernel, to keep the build short. It declares that envelope
// (attnfuzz_plugin_envelope), so campaigns aim their cases at it.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "attnfuzz_plugin.h"
#include "harness/case_json.h"
#include "harness/dtype.h"
#include "harness/envelope.h"
#include "backends/flash_backends.h"

namespace {

using namespace attnfuzz;

#define AF_STR2(x) #x
#define AF_STR(x) AF_STR2(x)
#ifndef ATTNFUZZ_FLASH_MUTANT_NAME
#error "build with ATTNFUZZ_FLASH_MUTANT_NAME"
#endif

int fail(char* msg, size_t len, const std::string& what) {
  std::snprintf(msg, len, "%s", what.c_str());
  return 1;
}

double read16(const af_tensor* t, int64_t off) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint16_t*>(t->data) + off, 2);
  return t->dtype == AF_F16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
}

int64_t offset(const af_tensor* t, int64_t b, int64_t h, int64_t s, int64_t d) {
  return b * t->strides[0] + h * t->strides[1] + s * t->strides[2] + (t->ndim == 4 ? d * t->strides[3] : 0);
}

// A strided ABI tensor as a float64 [B][H][S][D] (or [B][H][S]) Tensor.
Tensor to_tensor(const af_tensor* t) {
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  Tensor out(shape, uninitialized);
  const int64_t w = t->ndim == 4 ? t->shape[3] : 1;
  size_t i = 0;
  for (int64_t b = 0; b < t->shape[0]; ++b)
    for (int64_t h = 0; h < t->shape[1]; ++h)
      for (int64_t s = 0; s < t->shape[2]; ++s)
        for (int64_t d = 0; d < w; ++d, ++i)
          out.data[i] = t->dtype == AF_F32 ? static_cast<const float*>(t->data)[offset(t, b, h, s, d)] : read16(t, offset(t, b, h, s, d));
  return out;
}

void from_tensor(const Tensor& src, af_tensor* t) {
  const int64_t w = t->ndim == 4 ? t->shape[3] : 1;
  size_t i = 0;
  for (int64_t b = 0; b < t->shape[0]; ++b)
    for (int64_t h = 0; h < t->shape[1]; ++h)
      for (int64_t s = 0; s < t->shape[2]; ++s)
        for (int64_t d = 0; d < w; ++d, ++i) {
          const int64_t off = offset(t, b, h, s, d);
          const float f = static_cast<float>(src.data[i]);
          if (t->dtype == AF_F32) {
            static_cast<float*>(t->data)[off] = f;
          } else {
            const uint16_t bits = t->dtype == AF_F16 ? float_to_half_bits(f) : float_to_bf16_bits(f);
            std::memcpy(static_cast<uint16_t*>(t->data) + off, &bits, 2);
          }
        }
}

// The call as a Problem. The mask expression comes back from its JSON through the case
// parser (a case of the whole problem's size carrying it); restrictions only matter to the
// backend as "the dense mask is not the expression's band", so any non-empty list does.
struct Call {
  MaskExpr expr;
  Problem p;
};

std::unique_ptr<Call> make_call(const af_problem* a, bool with_data) {
  auto c = std::make_unique<Call>();
  Problem& p = c->p;
  p.shape = {a->batch, a->heads_q, a->heads_kv, a->seq_q, a->seq_kv, a->head_dim_qk, a->head_dim_v};
  p.dtype = a->dtype == AF_F16 ? DType::f16 : a->dtype == AF_BF16 ? DType::bf16 : DType::f32;
  p.scale = a->scale;
  if (a->has_softcap) p.softcap = a->softcap;
  if (!with_data) return c;
  Case whole;
  whole.shape = p.shape;
  whole.shape.seq_q = a->full_seq_q, whole.shape.seq_kv = a->full_seq_kv;
  whole.dtype = p.dtype;
  nlohmann::json j = to_json(whole);
  j["mask"] = nlohmann::json::parse(a->mask_json);
  c->expr = case_from_json(j, kNoMemoryBudget).mask;  // the caller checked the case against its budget
  p.mask_expr = &c->expr;
  p.q_offset = a->q_offset, p.kv_offset = a->kv_offset, p.full_seq_q = a->full_seq_q, p.full_seq_kv = a->full_seq_kv;
  if (a->restrictions_json && !nlohmann::json::parse(a->restrictions_json).empty()) p.restrictions.push_back(BandRestriction{});
  p.mask.assign(a->mask, a->mask + a->batch * a->heads_q * a->seq_q * a->seq_kv);
  return c;
}

FlashBackend& backend() {
  static FlashBackend b;
  return b;
}

int supports(const af_problem* a, char* msg, size_t len) {
  const auto c = make_call(a, false);
  if (c->p.dtype != DType::bf16) return fail(msg, len, "bf16 only (a planted-bug build)");
  if (auto why = backend().unsupported_reason(c->p)) return fail(msg, len, *why);
  return 0;
}

int forward(const af_problem* a, const af_tensor* q, const af_tensor* k, const af_tensor* v, af_tensor* o, af_tensor* lse, char* msg,
            size_t len) {
  try {
    auto c = make_call(a, true);
    c->p.q = to_tensor(q), c->p.k = to_tensor(k), c->p.v = to_tensor(v);
    const Forward f = backend().forward(c->p);
    from_tensor(f.o, o), from_tensor(f.lse, lse);
    return 0;
  } catch (const std::exception& e) {
    return fail(msg, len, e.what());
  }
}

int backward(const af_problem* a, const af_tensor* q, const af_tensor* k, const af_tensor* v, const af_tensor* o, const af_tensor* lse,
             const af_tensor* d_o, const af_tensor* d_lse, af_tensor* dq, af_tensor* dk, af_tensor* dv, char* msg, size_t len) {
  try {
    auto c = make_call(a, true);
    c->p.q = to_tensor(q), c->p.k = to_tensor(k), c->p.v = to_tensor(v);
    Forward f;
    f.o = to_tensor(o), f.lse = to_tensor(lse);
    const Gradients g = backend().backward(c->p, f, to_tensor(d_o), to_tensor(d_lse));
    from_tensor(g.dq, dq), from_tensor(g.dk, dk), from_tensor(g.dv, dv);
    return 0;
  } catch (const std::exception& e) {
    return fail(msg, len, e.what());
  }
}

const af_plugin kPlugin = {ATTNFUZZ_PLUGIN_ABI_VERSION,
                           AF_STR(ATTNFUZZ_FLASH_MUTANT_NAME),
                           "cuda.flash with a planted bug",
                           AF_BACKWARD_TAKES_DLSE | AF_MASKED_ROWS_ZERO | AF_COMPUTES_ON_GPU,
                           "{\"bf16\": \"bf16\"}",
                           supports,
                           forward,
                           backward};

}  // namespace

// cuda.flash's envelope, narrowed to the one dtype built.
extern "C" __attribute__((visibility("default"))) const char* attnfuzz_plugin_envelope(void) {
  static const std::string json = [] {
    SupportEnvelope e = backend().envelope();
    e.dtypes = {DType::bf16};
    return to_json(e).dump();
  }();
  return json.c_str();
}
extern "C" __attribute__((visibility("default"))) uint32_t attnfuzz_plugin_abi_version(void) { return ATTNFUZZ_PLUGIN_ABI_VERSION; }
extern "C" __attribute__((visibility("default"))) const af_plugin* attnfuzz_plugin_get(void) { return &kPlugin; }
