#include "campaign/junit.h"

namespace attnfuzz {
namespace {
std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t')
          o += ' ';
        else
          o += c;
    }
  }
  return o;
}
}  // namespace

std::string junit_xml(const std::string& suite, const std::vector<JUnitCase>& cases) {
  size_t failures = 0;
  for (const auto& c : cases) failures += !c.failure.empty();
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += "<testsuites><testsuite name=\"" + escape(suite) + "\" tests=\"" + std::to_string(cases.size()) + "\" failures=\"" +
       std::to_string(failures) + "\" errors=\"0\">\n";
  for (const auto& c : cases) {
    x += "  <testcase classname=\"" + escape(c.classname) + "\" name=\"" + escape(c.name) + "\">";
    if (!c.failure.empty()) x += "<failure message=\"" + escape(c.failure) + "\"/>";
    if (!c.output.empty()) x += "<system-out>" + escape(c.output) + "</system-out>";
    x += "</testcase>\n";
  }
  x += "</testsuite></testsuites>\n";
  return x;
}

}  // namespace attnfuzz
