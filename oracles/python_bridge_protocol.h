#pragma once
// The Python bridge's protocol (docs/python-backends.md): what attnfuzz and its Python worker
// (python/attnfuzz_py/worker.py) say to each other. Control messages are small JSON objects in
// the worker frames of harness/worker_protocol.h; tensor data lies in shared memory
// (oracles/shared_tensors.h) and a message only says where.
//
//   hello     -> {protocol, name, version, device, contracts, backward_takes_dlse,
//                 masked_rows_zero, returns_lse}           (once per worker process)
//   supports  -> {reason: null | "why not"}                (the problem, without tensors)
//   forward   -> {stats}   after writing o, lse             (q, k, v, mask in; o, lse poisoned)
//   backward  -> {stats}   after writing d_q, d_k, d_v      (+ o, lse, d_out, d_lse in)
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
inline constexpr int kPythonBridgeProtocol = 1;

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
// Where each tensor lies: {name: {offset (bytes, of element 0), dtype, shape, strides (elements)}}.
nlohmann::json tensors_json(const ShmLayout& layout);
// The request envelope: {"protocol", "op", ...}.
nlohmann::json bridge_request(const std::string& op);

}  // namespace attnfuzz
