"""The Python worker's side of the bridge without attnfuzz (tests/CMakeLists.txt: python_worker):
inputs are zero-copy views of the shared memory at any strides, results land in it, and the
views and parsed text the worker keeps between calls (python/attnfuzz_py/worker.py) never leak
one call's state into the next, nor outlive a remapping.
    python test_worker_views.py PACKAGE_DIR
"""
import json
import os
import sys

sys.path.insert(0, sys.argv[1])

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: {sys.executable} has no torch/numpy ({e}; run ci/setup.sh)")
    sys.exit(77)

from attnfuzz_py import Adapter, protocol  # noqa: E402
from attnfuzz_py.worker import _Worker  # noqa: E402

B, H, S, D = 1, 2, 4, 3


class Recorder(Adapter):
    """O = Q + 1, LSE = the row index; remembers what it received, then misuses its tensor objects."""
    name = "recorder"
    seen = []

    def forward(self, p, q, k, v):
        Recorder.seen.append({"q": q.clone(), "ptr": q.data_ptr(), "grad": q.requires_grad, "p": p, "noted": hasattr(p, "note"),
                              "bias": None if p.bias is None else p.bias.clone(), "bias_shape": p.bias_shape})
        q.requires_grad_()  # allowed on the object: must not reach the next call's q
        p.note = "mine"     # the same for the problem
        return q.detach() + 1, torch.arange(S, dtype=torch.float32).expand(B, H, S)


def strides_of(shape, order):
    """Element strides of `shape` laid out with its dims in `order` (outermost first)."""
    st, n = [0] * len(shape), 1
    for d in reversed(order):
        st[d], n = n, n * shape[d]
    return st


def line(name, offset, dtype, shape, strides):
    return (name, offset, dtype, shape, strides)


PROBLEM = {"batch": B, "heads_q": H, "heads_kv": H, "seq_q": S, "seq_kv": S, "head_dim_qk": D, "head_dim_v": D,
           "dtype": "fp32", "scale": 0.5, "softcap": None, "q_offset": 0, "kv_offset": 0, "full_seq_q": S, "full_seq_kv": S}


def payload(size, lines, **problem):
    return protocol.encode_request("forward", size, dict(PROBLEM, **problem), lines,
                                   {"kind": "sliding_window", "left": 2, "right": 0, "align": "top_left"},
                                   [{"left": 1, "right": 1, "align": "top_left", "inside": True}])


failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


fd = os.memfd_create("test-worker-views")
os.ftruncate(fd, 1 << 16)
w = _Worker(f"/proc/{os.getpid()}/fd/{fd}")
w.hello({"module": "__main__", "class": "Recorder", "options": {}})

# q in [B][S][H][D] order (strided, as a bshd case gives it), written through the memfd.
shape = [B, H, S, D]
q_strides = strides_of(shape, [0, 2, 1, 3])
q_values = np.arange(B * H * S * D, dtype=np.float32).reshape(B, S, H, D)  # memory order
os.pwrite(fd, q_values.tobytes(), 256)
lines = [line("q", 256, "fp32", shape, q_strides), line("k", 512, "fp32", shape, strides_of(shape, [0, 1, 2, 3])),
         line("v", 768, "fp32", shape, strides_of(shape, [0, 1, 2, 3])), line("o", 1024, "fp32", shape, strides_of(shape, [0, 1, 2, 3])),
         line("lse", 1280, "fp32", [B, H, S], [H * S, S, 1])]

for call in range(2):
    w.handle(payload(1 << 16, lines))
got = Recorder.seen
expected_q = torch.from_numpy(q_values.transpose(0, 2, 1, 3).copy())
check(torch.equal(got[0]["q"], expected_q), "q arrives with its strides honoured")
base = w.shm._torch_bases["u8"].data_ptr()
check(base <= got[0]["ptr"] < base + (1 << 16), "q is a view of the shared memory (zero-copy)")
check(got[0]["ptr"] == base + 256, "q's view starts at its offset")
check(not got[1]["grad"], "requires_grad_ on one call's q does not reach the next call's q")
check(got[0]["p"] is not got[1]["p"] and not got[1]["noted"], "each call gets a fresh Problem")
o = np.frombuffer(os.pread(fd, B * H * S * D * 4, 1024), np.float32).reshape(B, H, S, D)
check(np.array_equal(o, expected_q.numpy() + 1), "O lands in the shared memory at its offset")
lse = np.frombuffer(os.pread(fd, B * H * S * 4, 1280), np.float32)
check(np.array_equal(lse, np.tile(np.arange(S, dtype=np.float32), B * H)), "LSE lands in the shared memory")

# attnfuzz grew the memory: the same lines are views of the new mapping, not of the old one.
os.ftruncate(fd, 1 << 20)
q_values += 100
os.pwrite(fd, q_values.tobytes(), 256)
w.handle(payload(1 << 20, lines))
base = w.shm._torch_bases["u8"].data_ptr()
check(base <= got[2]["ptr"] < base + (1 << 20), "after a remapping, q is a view of the new mapping")
check(torch.equal(got[2]["q"], expected_q + 100), "after a remapping, q holds the current values")

# A request with more new entries than the cache holds still gets every tensor (the kept ones are
# taken before the new ones push anything out).
w.tensors = protocol.TextCache(2)
w.tables = protocol.TextCache(1)
w.handle(payload(1 << 20, lines))
w.handle(payload(1 << 20, lines[:4] + [lines[4][:3] + ([B, H, S], [H, 1, B * H])]))  # a new table: lse in [S][B][H] order
check(torch.equal(got[4]["q"], expected_q + 100), "a request that overflows the cache still sees its tensors")
lse = np.frombuffer(os.pread(fd, B * H * S * 4, 1280), np.float32).reshape(S, B * H).T.reshape(-1)  # [S][B*H] in memory
check(np.array_equal(lse, np.tile(np.arange(S, dtype=np.float32), B * H)), "LSE lands at the new table's strides")

# The problem's fields from the binary request; the mask expression and the bands parsed when read.
p = got[4]["p"]
check((p.batch, p.heads_q, p.seq_kv, p.head_dim_v, p.dtype, p.scale, p.softcap) == (B, H, S, D, "fp32", 0.5, None),
      f"the problem's fields arrive: {vars(p)}")
check(p.mask_expr == {"kind": "sliding_window", "left": 2, "right": 0, "align": "top_left"}, "the mask expression arrives")
check(p.restrictions == [{"left": 1, "right": 1, "align": "top_left", "inside": True}], "the band restrictions arrive")
w.handle(payload(1 << 20, lines, softcap=30.0, dtype="fp16", q_offset=3))
p = got[5]["p"]
check((p.softcap, p.dtype, p.q_offset) == (30.0, "fp16", 3), "softcap, dtype and offsets arrive")

# The score bias: its shape in the problem entry, the tensor "bias" (dense, the case dtype, its
# broadcast dimensions of extent 1) as p.bias; none without one.
check(got[5]["bias"] is None and got[5]["bias_shape"] is None, "a call without a bias has p.bias = p.bias_shape = None")
bias_values = np.arange(H * S, dtype=np.float32).reshape(1, H, 1, S) - 3.5
os.pwrite(fd, bias_values.tobytes(), 2048)
w.handle(payload(1 << 20, lines + [line("bias", 2048, "fp32", [1, H, 1, S], [H * S, S, S, 1])], bias_shape=(1, H, 1, S)))
p = got[6]["p"]
check(got[6]["bias_shape"] == (1, H, 1, S) and got[6]["bias"] is not None and torch.equal(got[6]["bias"], torch.from_numpy(bias_values)),
      f"the bias arrives as p.bias with p.bias_shape: {got[6]['bias_shape']}")

# An empty reply is ok without stats (forward, backward); hello answers JSON.
check(w.handle(payload(1 << 20, lines)) == b"", "a forward without stats is answered with an empty reply")

# bf16 arrives as bf16, from its bits.
bits = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16).view(torch.uint16).numpy()
os.pwrite(fd, bits.tobytes(), 4096)
t = w.shm.torch_view(4096, "bf16", [3], [1])
check(t.dtype == torch.bfloat16 and t.tolist() == [1.5, -2.0, 3.25], "bf16 is viewed from its bits")

# supports: an empty reply when supported (Recorder has the base class's), the reason otherwise.
check(w.handle(protocol.encode_request("supports", 1 << 20, PROBLEM, [])) == b"", "supports answers an empty reply when supported")
Recorder.supports = lambda self, p: f"no seq_q={p.seq_q}"
check(json.loads(w.handle(protocol.encode_request("supports", 1 << 20, PROBLEM, [])))["reason"] == f"no seq_q={S}",
      "supports answers the reason")
Recorder.supports = lambda self, p: f"bias {p.bias_shape} {p.bias}"
check(json.loads(w.handle(protocol.encode_request("supports", 1 << 20, dict(PROBLEM, bias_shape=(2, 1, 1, S)), [])))["reason"]
      == f"bias (2, 1, 1, {S}) None", "supports sees the bias's shape, not its values")
del Recorder.supports

# The replies' checksum is FNV-1a 64 of kind, seq (8 bytes, little-endian) and payload, as
# harness/worker_frame.cpp checks it (reduced every 8 bytes in Python: the same sum).
for n in (0, 1, 7, 8, 9, 63, 200):
    data = bytes(range(n))
    h = 1469598103934665603
    for ch in b"R" + (0x0123456789ABCDEF).to_bytes(8, "little") + data:
        h = ((h ^ ch) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    check(protocol._frame_sum(b"R", 0x0123456789ABCDEF, data) == h, f"the frame checksum of a {n}-byte payload")

# dBias (protocol 5): the problem's bias_requires_grad reaches p, the adapter's fourth result lands in
# d_bias (the bias's shape, dense); a missing or unasked-for dBias is the adapter's error, said so.
class Gradients(Adapter):
    name = "gradients"
    returns_dbias = None  # None: where asked; True, False: planted misuse

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        Gradients.asked = p.bias_requires_grad
        g = (q.detach() * 2, k.detach() * 3, v.detach() * 4)
        returns_dbias = p.bias_requires_grad if Gradients.returns_dbias is None else Gradients.returns_dbias
        return g + (p.bias * 5,) if returns_dbias else g


g_worker = _Worker(f"/proc/{os.getpid()}/fd/{fd}")
g_worker.hello({"module": "__main__", "class": "Gradients", "options": {}})
dense = strides_of(shape, [0, 1, 2, 3])
at = {name: 8192 + 256 * i for i, name in enumerate(("q", "k", "v", "o", "d_out", "d_q", "d_k", "d_v", "bias", "d_bias"))}
bias_shape = (1, H, 1, S)
grad_lines = [line(n, at[n], "fp32", shape, dense) for n in ("q", "k", "v", "o", "d_out", "d_q", "d_k", "d_v")]
grad_lines += [line("lse", 12288, "fp32", [B, H, S], [H * S, S, 1]), line("d_lse", 12544, "fp32", [B, H, S], [H * S, S, 1]),
               line("bias", at["bias"], "fp32", list(bias_shape), [H * S, S, S, 1])]
with_dbias = grad_lines + [line("d_bias", at["d_bias"], "fp32", list(bias_shape), [H * S, S, S, 1])]
os.pwrite(fd, bias_values.tobytes(), at["bias"])
os.pwrite(fd, np.full(H * S, np.nan, np.float32).tobytes(), at["d_bias"])


def backward(lines, asks):
    return g_worker.handle(protocol.encode_request("backward", 1 << 20, dict(PROBLEM, bias_shape=bias_shape, bias_requires_grad=asks),
                                                   lines))


check(backward(with_dbias, True) == b"" and Gradients.asked, "a backward asking for dBias reaches the adapter as p.bias_requires_grad")
d_bias = np.frombuffer(os.pread(fd, H * S * 4, at["d_bias"]), np.float32).reshape(bias_shape)
check(np.array_equal(d_bias, 5 * bias_values), f"dBias lands in d_bias, in the bias's shape: {d_bias.ravel()}")
check(backward(grad_lines, False) == b"" and not Gradients.asked, "a backward without dBias: p.bias_requires_grad is False")
for returns_dbias, asks, lines_, message in [(False, True, with_dbias, "asks for dBias"), (True, False, grad_lines, "asks for no dBias"),
                                             (True, True, grad_lines, "no d_bias tensor")]:
    Gradients.returns_dbias = returns_dbias
    try:
        backward(lines_, asks)
        check(False, f"a backward with dBias {'asked' if asks else 'not asked'} and {'returned' if returns_dbias else 'missing'} is refused")
    except (ValueError, RuntimeError) as e:
        check(message in str(e), f"the refusal says '{message}': {e}")

# Another protocol version is refused, naming both: a binary request, and a JSON one (protocol 2's).
bad = bytearray(payload(1 << 20, lines))
bad[0:8] = (7).to_bytes(8, "little")
for what, request in [("binary", bytes(bad)), ("JSON", b'{"protocol": 2, "op": "forward", "shm_size": 65536}\n{}')]:
    try:
        w.handle(request)
        check(False, f"a {what} request of another protocol version is refused")
    except RuntimeError as e:
        v = 7 if what == "binary" else 2
        check(f"speaks bridge protocol {v}, this attnfuzz_py speaks {protocol.PROTOCOL_VERSION}" in str(e), f"the refusal names both versions: {e}")

print("python worker views:", "all checks passed" if not failures else f"{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
