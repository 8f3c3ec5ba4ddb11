#pragma once
// The interface every implementation under test plugs in through (docs/semantics.md,
// "The backend interface"). The harness depends on this header only.
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/contract.h"
#include "harness/device.h"
#include "harness/envelope.h"
#include "harness/error_model.h"
#include "harness/errors.h"
#include "harness/problem.h"

namespace attnfuzz {

// Thrown by a backend's forward or backward when the call wrote where it must not: into one of
// its inputs, or outside its outputs' elements (row and head padding, the gaps of a layout, the
// slack before a base offset), which in a real caller is a neighbour's memory. The harness
// records an out_of_bounds finding naming the tensor, not a backend_error: the call may have
// computed every element right.
struct OutOfBoundsWrite : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Merger;  // harness/merge.h

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const { return {}; }
  // Where the backend's code came from, recorded with its findings (Reproducer::backend_sources)
  // so a replay elsewhere can find the same code: a plugin's file name and content hash, an
  // adapter's module and class and the versions of Python and its libraries. Built-in backends
  // are the harness's own (its commit is in the environment): nothing.
  virtual std::map<std::string, std::string> provenance() const { return {}; }
  virtual Device device() const { return Device::cpu; }
  // Whether it computes on a GPU: its faults can outlive the call, and it runs isolated.
  bool on_gpu() const { return device() != Device::cpu; }
  // Whether a fault of its GPU code can break this process's CUDA context, so that no GPU backend
  // of this process may run after it: in-process GPU code can; a backend that computes in a
  // process of its own (a Python adapter) breaks only that process's.
  virtual bool faults_reach_this_process() const { return on_gpu(); }
  // What it keeps in this process's memory per (q, kv) pair while it runs, for the memory
  // estimate (harness/case.h, HostWork): by default nothing (a tiled kernel, a GPU backend, a
  // Python adapter in its own process; a plugin's own allocations are its own to bound).
  virtual HostScores host_scores() const { return HostScores::none; }
  // How the backend computes for inputs of this dtype; nothing when the dtype is unsupported.
  virtual std::optional<Contract> contract(DType d) const { return natural_contract(d); }
  // Whether fully masked rows follow the convention (O = 0, LSE = -inf, zero gradients).
  // When not, those rows are left out of the comparison and the report says so.
  virtual bool masked_rows_zero() const { return true; }
  // Whether forward() returns the LSE. Without it, LSE is not compared and compositions
  // that merge through LSEs cannot be built from this backend.
  virtual bool returns_lse() const { return true; }
  // Relative accuracy of the LSE (stored as fp32 by everyone): 2^-24 unless the backend
  // declares a coarser one (a fast approximate exp, say). Sets the LSE's tolerance floor.
  virtual double lse_unit_roundoff(DType) const { return unit_roundoff(DType::f32); }
  // Whether it accumulates its scores on tensor cores, whose fp32 sums of 16-bit or tf32 products
  // truncate toward zero at every MMA step: the LSE's error model then carries that part
  // (harness/error_model.h, "truncation"). Every GPU backend is taken to, unless it says not.
  virtual bool accumulates_on_tensor_cores() const { return on_gpu(); }
  // The public function this backend is one implementation of, when that function promises the
  // same numerics whichever implementation runs (JAX's jax.nn.dot_product_attention, its xla and
  // cudnn paths), or empty. A contract alone is a range (fp32 accumulation up to operands rounded
  // to it), so `consistency` compares only backends of one API: two libraries that both keep a
  // bf16 contract at different points of that range disagree with no promise broken.
  virtual std::string api() const { return {}; }
  // What it accepts, declared once (harness/envelope.h): its refusals and the generators' aim
  // both read it. By default every dtype it has a contract for, and nothing else restricted
  // (SupportEnvelope::dlse says what backward_takes_dlse says).
  virtual SupportEnvelope envelope() const {
    SupportEnvelope e;
    e.dtypes.clear();
    for (DType d : {DType::f32, DType::f16, DType::bf16})
      if (contract(d)) e.dtypes.push_back(d);
    e.dlse = backward_takes_dlse();
    return e;
  }
  // Why this backend cannot run the problem, or nothing when it can: the envelope's enforced
  // clauses; a backend whose library decides the rest adds the library's verdict.
  virtual std::optional<std::string> unsupported_reason(const Problem& p) const { return envelope().refusal(p); }
  // Outputs that may differ bitwise between two runs on identical inputs, as the backend's
  // documentation says (a backward that accumulates dQ with atomic adds, in whatever order
  // the blocks finish), and why. The determinism check skips them; every run of them is
  // still judged against the reference. Every other output must repeat bit for bit.
  virtual std::vector<TensorId> nondeterministic_outputs() const { return {}; }
  virtual std::string why_nondeterministic() const { return {}; }
  // Whether the backend promises batch invariance: each (batch, head) problem gives the same
  // bits whatever else shares its call (a batch-invariant kernel's work split, tile sizes and
  // reduction order do not depend on the batch size, as a split-KV heuristic that fills the
  // GPU does). The batch-invariance check (harness/differential.h) holds a backend that
  // declares it to that, on the outputs that repeat bit for bit.
  virtual bool batch_invariant() const { return false; }
  // Whether the backend computes the batch as one sequence of documents (a document mask over
  // the packed batch, as FlexAttention's document adapters do), so that a non-finite input of one
  // batch entry reaches the others through products with masked zeros (0 * NaN): the verdict then
  // leaves those heads out in every batch entry (docs/semantics.md, "Non-finite inputs").
  virtual bool mixes_batch_entries() const { return false; }
  // Whether backward() honours d_lse. When it does not, the composition engine
  // adds the dLSE term itself and says so.
  virtual bool backward_takes_dlse() const { return true; }
  // How the compositions run with this backend merge partial results: nothing for the
  // harness's float64 merge (harness/merge.h), or the backend's own (a GPU merge kernel).
  virtual const Merger* merger() const { return nullptr; }
  virtual Forward forward(const Problem& p) = 0;
  virtual Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) = 0;
};

// A backend that is unknown or cannot load here: one line saying which and why. Thrown before
// any case runs (backends/registry.h make_backends, the campaign's probe of its workers). The
// line quotes user input (a name, a path, a plugin's or adapter's own message): it is escaped
// and cut (harness/errors.h), so a 1 MB name or an ESC in it never reaches the terminal raw.
struct BackendLoadError : std::runtime_error {
  explicit BackendLoadError(const std::string& what) : std::runtime_error(message_safe(what, 600)) {}
};

}  // namespace attnfuzz
