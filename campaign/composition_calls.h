#pragma once
// What the calls of a case's composition see, for known-deviation predicates (campaign/known.h):
// the composition engine (harness/compose.h) run with a probe backend that computes nothing but
// looks at every call's problem. One engine decides the parts; nothing here splits a case again.
#include <vector>

#include "harness/case.h"

namespace attnfuzz {

struct CompositionCall {
  Shape shape;              // of this call: a part has fewer queries or keys than the case
  bool masked_row = false;  // some query row of this call sees no key
};

// Every backend call of the case's composition, forward ones (a backward call repeats a
// forward one's problem).
std::vector<CompositionCall> composition_calls(const Case& c);

}  // namespace attnfuzz
