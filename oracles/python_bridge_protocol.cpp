#include "oracles/python_bridge_protocol.h"

#include <stdexcept>

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

nlohmann::json problem_json(const Problem& p) {
  const Shape& s = p.shape;
  nlohmann::json restrictions = nlohmann::json::array();
  for (const auto& r : p.restrictions)
    restrictions.push_back({{"left", r.left},
                            {"right", r.right},
                            {"align", r.align == Align::bottom_right ? "bottom_right" : "top_left"},
                            {"inside", r.inside}});
  return {{"batch", s.batch},
          {"heads_q", s.heads_q},
          {"heads_kv", s.heads_kv},
          {"seq_q", s.seq_q},
          {"seq_kv", s.seq_kv},
          {"head_dim_qk", s.head_dim_qk},
          {"head_dim_v", s.head_dim_v},
          {"dtype", std::string(to_string(p.dtype))},
          {"scale", p.scale},
          {"softcap", p.softcap ? nlohmann::json(*p.softcap) : nlohmann::json(nullptr)},
          {"mask", p.mask_expr ? to_json(*p.mask_expr) : nlohmann::json{{"kind", "none"}}},
          {"restrictions", restrictions},
          {"q_offset", p.q_offset},
          {"kv_offset", p.kv_offset},
          {"full_seq_q", p.full_seq_q},
          {"full_seq_kv", p.full_seq_kv}};
}

std::string tensor_line(const std::string& name, const ShmTensor& t) {
  // Written by hand: a name, a dtype name and integers need no escaping, and this runs for
  // every tensor of every call.
  auto ints = [&](const auto& v) {
    std::string s = "[";
    for (int i = 0; i < t.pl.ndim; ++i) s += (i ? "," : "") + std::to_string(v[static_cast<size_t>(i)]);
    return s + "]";
  };
  return "[\"" + name + "\"," + std::to_string(t.first_element()) + ",\"" + shm_type_name(t.type) + "\"," + ints(t.pl.sizes) + "," +
         ints(t.pl.strides) + "]";
}

nlohmann::json bridge_request(const std::string& op) { return {{"protocol", kPythonBridgeProtocol}, {"op", op}}; }

std::string request_payload(const nlohmann::json& envelope, const Problem* p, const ShmLayout* layout) {
  std::string out = envelope.dump();
  if (p) out += "\n" + problem_json(*p).dump();
  if (layout)
    for (const auto& [name, t] : layout->tensors()) out += "\n" + tensor_line(name, t);
  return out;
}

}  // namespace attnfuzz
