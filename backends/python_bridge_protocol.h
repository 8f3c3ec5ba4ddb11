#pragma once
// The Python bridge's protocol (docs/python-backends.md): what attnfuzz and its Python worker
// (python/attnfuzz_py/worker.py) say to each other, in the worker frames of
// harness/worker_frame.h. Tensor data lies in shared memory (backends/shared_tensors.h) and a
// message only says where.
//
//   hello     -> {protocol, name, version, device, contracts, backward_takes_dlse,
//                 masked_rows_zero, returns_lse, checks_support}  (once per worker process)
//   supports  -> {ok, reason: "why not"} or nothing (supported)  (the problem, without tensors;
//                                                   only asked of adapters with checks_support)
//   forward   -> {ok, stats} or nothing after writing o, lse      (q, k, v, mask, bias in; o, lse poisoned)
//   backward  -> {ok, stats} or nothing after writing d_q, d_k, d_v, and d_bias where the problem
//                                                   asks for it (+ o, lse, d_out, d_lse in;
//                                                   stats: the adapter's stats(), where not empty;
//                                                   an empty reply is ok without stats: every
//                                                   reply byte costs its checksum in Python)
//   any error -> {ok: false, error, traceback}             (the traceback's last lines)
//
// hello is one JSON object, {protocol, op: "hello", module, class, options}, so that a worker of
// any version reads it and can say which version it speaks. Every other request is binary, a
// fixed layout the worker reads with one struct.unpack each (python/attnfuzz_py/protocol.py has
// the same layout), little-endian 8-byte words:
//
//   header   protocol, op (BridgeOp), shm_size (bytes), tensor count, extra's length (bytes)
//   problem  batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v,
//            dtype (DType: 0 fp32, 1 fp16, 2 bf16), scale (float64), softcap (float64, NaN: none),
//            q_offset, kv_offset, full_seq_q, full_seq_kv,
//            bias_shape[4] (the score bias's extents, [B|1][Hq|1][Sq|1][Skv|1]; 0 0 0 0: no bias),
//            bias_requires_grad (1: the backward returns dBias, Problem::bias_requires_grad; 0: not)
//   tensors  each: name (wire_code, harness/tensors.def), type (ShmType: 0 fp32, 1 fp16, 2 bf16,
//            3 u8), ndim, offset (bytes, of element 0), sizes[4], strides[4] (elements)
//            The score bias (harness/case.h, ScoreBias), where the call has one, is the tensor
//            "bias" (wire code 11) of forward and backward: dense, in the case dtype, in its
//            broadcast shape (the dimensions of extent 1 are broadcast), never laid out. Its
//            gradient, where bias_requires_grad, is the backward's output "d_bias" (wire code 12):
//            dense in the bias's shape and the case dtype, poisoned before the call, like d_q:
//            dBias = dS (before the softcap's chain factor) summed over the broadcast dimensions,
//            dS_ij = P_ij (dP_ij - D_i + dLSE_i) (docs/semantics.md, "Score bias").
//   extra    JSON {"mask": the mask expression, "restrictions": [band, ...]}, parsed only if the
//            adapter reads them (the dense mask is a tensor)
//
// Replies are small JSON objects. Every request carries the protocol version; each side refuses
// another one, by name.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/problem.h"
#include "backends/shared_tensors.h"

namespace attnfuzz {

// Bumped on any change of the messages' meaning; python/attnfuzz_py/protocol.py has the same number.
// 2: requests as JSON lines (envelope, problem, one per tensor) instead of one object.
// 3: requests other than hello in a binary fixed layout instead of JSON lines.
// 4: the score bias: the problem's bias_shape, and the bias tensor (a worker of protocol 3 reads
//    a shorter problem entry and would drop the bias).
// 5: dBias: the problem's bias_requires_grad word, and the backward's output d_bias (a worker of
//    protocol 4 reads a shorter problem entry and would return no dBias).
inline constexpr int kPythonBridgeProtocol = 5;

enum class BridgeOp : int64_t { supports = 1, forward = 2, backward = 3 };
// "MODULE:CLASS[?key=value&key=value]" (the part after "py:"): the adapter class and the
// keyword arguments (strings) its constructor gets.
struct AdapterSpec {
  std::string module, cls;
  std::map<std::string, std::string> options;
  std::string text;  // as given
};
// Throws std::invalid_argument naming what is wrong.
AdapterSpec parse_adapter_spec(const std::string& text);

// The mask expression and the band restrictions of a composition's call (the request's extra).
nlohmann::json problem_extra_json(const Problem& p);
// hello: the JSON envelope with the adapter to load.
std::string hello_payload(const AdapterSpec& spec);
// supports (layout null), forward, backward: the binary request above.
std::string request_payload(BridgeOp op, size_t shm_size, const Problem& p, const ShmLayout* layout);

}  // namespace attnfuzz
