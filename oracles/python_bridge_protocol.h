#pragma once
// The Python bridge's protocol (docs/python-backends.md): what attnfuzz and its Python worker
// (python/attnfuzz_py/worker.py) say to each other. Control messages are small JSON documents in
// the worker frames of harness/worker_protocol.h; tensor data lies in shared memory
// (oracles/shared_tensors.h) and a message only says where. A request is one document a line:
// the envelope {protocol, op, ...}, then the problem (supports, forward, backward), then one line
// per tensor (forward, backward), so that the worker can keep what it parsed by its text.
//
//   hello     -> {protocol, name, version, device, contracts, backward_takes_dlse,
//                 masked_rows_zero, returns_lse, checks_support}  (once per worker process)
//   supports  -> {reason: null | "why not"}                (the problem, without tensors; only
//                                                           asked of adapters with checks_support)
//   forward   -> {[stats]} after writing o, lse             (q, k, v, mask in; o, lse poisoned)
//   backward  -> {[stats]} after writing d_q, d_k, d_v      (+ o, lse, d_out, d_lse in; stats: the
//                                                           adapter's stats(), where not empty)
//   any error -> {ok: false, error, traceback}             (the traceback's last lines)
//
// Every request carries the protocol version; each side refuses another one, by name.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/problem.h"
#include "oracles/shared_tensors.h"

namespace attnfuzz {

// Bumped on any change of the messages' meaning; python/attnfuzz_py/protocol.py has the same number.
// 2: requests as lines (envelope, problem, one per tensor) instead of one object.
inline constexpr int kPythonBridgeProtocol = 2;

// "MODULE:CLASS[?key=value&key=value]" (the part after "py:"): the adapter class and the
// keyword arguments (strings) its constructor gets.
struct AdapterSpec {
  std::string module, cls;
  std::map<std::string, std::string> options;
  std::string text;  // as given
};
// Throws std::invalid_argument naming what is wrong.
AdapterSpec parse_adapter_spec(const std::string& text);

// The problem as the worker receives it: shape, dtype, scale, softcap, the mask expression with
// the call's offsets and band restrictions (the fields of the C ABI's af_problem).
nlohmann::json problem_json(const Problem& p);
// Where one tensor lies, a line of the tensor table: ["name", offset (bytes, of element 0),
// "dtype", [shape], [strides (elements)]]. One line a tensor, so that the worker keeps each
// tensor's views by its line: a backward's q, k, v, o, lse and mask repeat its forward's.
std::string tensor_line(const std::string& name, const ShmTensor& t);
// The request envelope: {"protocol", "op", ...}.
nlohmann::json bridge_request(const std::string& op);
// A request's payload: the envelope, then problem_json(*p) and a tensor_line of each of the
// layout's tensors where given, one JSON document a line (a dumped document holds no raw newline). hello is the envelope alone,
// so that a worker of any version reads it and can say which version it speaks.
std::string request_payload(const nlohmann::json& envelope, const Problem* p = nullptr, const ShmLayout* layout = nullptr);

}  // namespace attnfuzz
