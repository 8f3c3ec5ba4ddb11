#pragma once
// The interface every implementation under test plugs in through (DESIGN.md,
// "Implementations under test"). The harness depends on this header only.
#include <memory>
#include <optional>
#include <string>

#include "harness/problem.h"

namespace attnfuzz {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const { return {}; }
  // Why this backend cannot run the problem, or nothing when it can.
  virtual std::optional<std::string> unsupported_reason(const Problem&) const { return std::nullopt; }
  // Whether backward() honours d_lse. When it does not, the composition engine
  // adds the dLSE term itself and says so.
  virtual bool backward_takes_dlse() const { return true; }
  virtual Forward forward(const Problem& p) = 0;
  virtual Gradients backward(const Problem& p, const Forward& fwd, const Tensor& d_out, const Tensor& d_lse) = 0;
};

}  // namespace attnfuzz
