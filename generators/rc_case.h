#pragma once
// RapidCheck's Gen<Case>: the random case domains (generators/random_case.h) with the
// shrinkers of generators/shrink.h, so a failing property reports a minimal case.
// RapidCheck's size (0..100) scales the largest sequence length and head dimension of the
// options' tier (generators/domain.h; RandomCaseOptions{} is the fast test tier).
#include <rapidcheck.h>

#include <algorithm>

#include "generators/random_case.h"
#include "generators/shrink.h"

namespace attnfuzz {

inline rc::Gen<Case> gen_case(RandomCaseOptions opt = {}) {
  return rc::Gen<Case>([opt](const rc::Random& random, int size) {
    rc::Random r = random;
    RandomCaseOptions o = opt;
    o.max_seq = std::max<int64_t>(1, opt.max_seq * std::max(size, 1) / 100);
    o.max_dim = std::max<int64_t>(1, opt.max_dim * std::max(size, 1) / 100);
    const Case c = random_case(r.next(), o);
    return rc::shrinkable::shrinkRecur(c, [](const Case& x) { return rc::seq::fromContainer(shrink_candidates(x)); });
  });
}

}  // namespace attnfuzz
