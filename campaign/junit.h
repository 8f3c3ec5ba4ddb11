#pragma once
// JUnit XML for CI systems: one test case per reproducer or per finding. No timestamps or
// durations, so two identical runs give identical files.
#include <string>
#include <vector>

namespace attnfuzz {

struct JUnitCase {
  std::string classname, name;
  std::string failure;  // empty: passed
  std::string output;   // optional system-out text
};

std::string junit_xml(const std::string& suite, const std::vector<JUnitCase>& cases);

}  // namespace attnfuzz
