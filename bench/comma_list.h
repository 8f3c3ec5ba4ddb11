// The benchmarks' comma-separated arguments (--backends a,b): the items in order, empty ones
// dropped.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace attnfuzz::bench {

inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

}  // namespace attnfuzz::bench
