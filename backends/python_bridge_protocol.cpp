#include "backends/python_bridge_protocol.h"

#include <algorithm>
#include <bit>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "harness/case.h"
#include "harness/case_json.h"

namespace attnfuzz {

AdapterSpec parse_adapter_spec(const std::string& text) {
  AdapterSpec s;
  s.text = text;
  const size_t q = text.find('?');
  const std::string target = text.substr(0, q);
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size())
    throw std::invalid_argument("python backend 'py:" + text + "': expected py:MODULE:CLASS[?key=value&...]");
  s.module = target.substr(0, colon);
  s.cls = target.substr(colon + 1);
  if (q != std::string::npos) {
    std::string rest = text.substr(q + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t amp = rest.find('&', start);
      const std::string kv = rest.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        throw std::invalid_argument("python backend 'py:" + text + "': option '" + kv + "' is not key=value");
      s.options[kv.substr(0, eq)] = kv.substr(eq + 1);
      if (amp == std::string::npos) break;
      start = amp + 1;
    }
  }
  return s;
}

nlohmann::json problem_extra_json(const Problem& p) {
  nlohmann::json restrictions = nlohmann::json::array();
  for (const auto& r : p.restrictions)
    restrictions.push_back({{"left", r.left},
                            {"right", r.right},
                            {"align", r.align == Align::bottom_right ? "bottom_right" : "top_left"},
                            {"inside", r.inside}});
  nlohmann::json extra{{"mask", p.mask_expr ? to_json(*p.mask_expr) : nlohmann::json{{"kind", "none"}}}, {"restrictions", restrictions}};
  // A ragged batch (only to an adapter whose envelope says ragged): each sequence's lengths in the
  // whole problem, in which its mask is evaluated (harness/problem.h).
  if (p.ragged()) {
    nlohmann::json ragged{{"lens_q", p.lens_q}, {"lens_kv", p.lens_kv}};
    // A paged case: the physical page of each sequence's keys [k P, (k + 1) P) of the whole
    // problem, the table cudnn.paged lays its pool out by (harness/case.h, page_table), so a
    // paged adapter reads the keys through the same pages.
    if (p.page_size > 0) {
      const PageTable t = page_table(p.lens_kv, p.page_size, p.page_seed);
      nlohmann::json rows = nlohmann::json::array();
      for (int64_t b = 0; b < static_cast<int64_t>(p.lens_kv.size()); ++b) {
        nlohmann::json row = nlohmann::json::array();
        for (int64_t k = 0; k < (p.lens_kv[static_cast<size_t>(b)] + p.page_size - 1) / p.page_size; ++k) row.push_back(t.at(b, k));
        rows.push_back(std::move(row));
      }
      ragged["page_size"] = p.page_size;
      ragged["pages"] = t.pages;
      ragged["page_table"] = std::move(rows);
    }
    extra["ragged"] = std::move(ragged);
  }
  return extra;
}

std::string hello_payload(const AdapterSpec& spec) {
  return nlohmann::json{{"protocol", kPythonBridgeProtocol}, {"op", "hello"}, {"module", spec.module}, {"class", spec.cls}, {"options", spec.options}}
      .dump();
}

namespace {

static_assert(std::endian::native == std::endian::little, "the binary requests are little-endian words, written as they lie in memory");

void put(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, double v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

}  // namespace

std::string request_payload(BridgeOp op, size_t shm_size, const Problem& p, const ShmLayout* layout) {
  const std::string extra = problem_extra_json(p).dump();
  const size_t n = layout ? layout->tensors().size() : 0;
  std::string out;
  out.reserve(8 * (5 + 19 + 12 * n) + extra.size());
  for (int64_t w : {int64_t{kPythonBridgeProtocol}, static_cast<int64_t>(op), static_cast<int64_t>(shm_size), static_cast<int64_t>(n),
                    static_cast<int64_t>(extra.size())})
    put(out, w);
  const Shape& s = p.shape;
  for (int64_t w : {s.batch, s.heads_q, s.heads_kv, s.seq_q, s.seq_kv, s.head_dim_qk, s.head_dim_v, static_cast<int64_t>(p.dtype)}) put(out, w);
  put(out, p.scale);
  put(out, p.softcap ? *p.softcap : std::numeric_limits<double>::quiet_NaN());
  for (int64_t w : {p.q_offset, p.kv_offset, p.full_seq_q, p.full_seq_kv}) put(out, w);
  for (size_t i = 0; i < 4; ++i) put(out, p.has_bias() ? p.bias.shape.at(i) : int64_t{0});
  put(out, int64_t{p.has_bias() && p.bias_requires_grad});
  if (layout)
    for (const auto& [tensor, t] : layout->tensors()) {
      for (int64_t w : {wire_code(tensor), static_cast<int64_t>(t.type), int64_t{t.pl.ndim}, static_cast<int64_t>(t.first_element())})
        put(out, w);
      for (int i = 0; i < 4; ++i) put(out, i < t.pl.ndim ? t.pl.sizes[static_cast<size_t>(i)] : int64_t{0});
      for (int i = 0; i < 4; ++i) put(out, i < t.pl.ndim ? t.pl.strides[static_cast<size_t>(i)] : int64_t{0});
    }
  return out + extra;
}

}  // namespace attnfuzz
