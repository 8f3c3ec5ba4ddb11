"""The worker's side of the bridge protocol (backends/python_bridge_protocol.h).

Frames are those of harness/worker_frame.h:

    "AF1 " kind ' ' seq(16 hex) ' ' length(8 hex) ' ' fnv1a64(kind, seq, payload)(16 hex) '\\n' payload

hello is one JSON object ({protocol, op: "hello", module, class, options}), readable by a worker
of any version. supports, forward and backward are binary, little-endian 8-byte words in a
fixed layout (HEADER, PROBLEM, TENSOR below; the C++ header has the same table), then the
problem's extra: JSON of the mask expression and the band restrictions, parsed only when an
adapter reads them. Tensor data is never in a frame: it lies in one shared memory region (a
memfd of the attnfuzz process, opened through /proc), and the tensor table says where each
tensor starts (bytes), its type, shape and strides (elements). Views of it are zero-copy.

Speed (docs/python-backends.md, "Speed"): a byte-wise checksum costs about 0.3 us a byte in
Python, so the worker does not check the requests' checksums (only attnfuzz holds the write end
of the request pipe: nothing else can put bytes there) and keeps its replies short; attnfuzz
checks every reply's. A request is read with one struct.unpack per part, no text parsed; the
worker keeps the views of the last tensors it saw, keyed by their table entries (a backward
repeats its forward's q, k, v, o, lse, mask and bias).
"""
import collections
import json
import mmap
import os
import struct
import threading

import numpy as np

# Bumped on any change of the messages' meaning; backends/python_bridge_protocol.h has the same number.
# 5: dBias (the problem's bias_requires_grad, the backward's output "d_bias"); 4: the score bias
# (the problem's bias_shape, the tensor "bias"); 3: requests other than hello binary (2: JSON lines).
PROTOCOL_VERSION = 5

# The binary requests (backends/python_bridge_protocol.h).
HEADER = struct.Struct("<5q")  # protocol, op, shm_size, tensor count, extra's length
OPS = {1: "supports", 2: "forward", 3: "backward"}
PROBLEM = struct.Struct("<8q2d9q")
# Then bias_shape: the score bias's extents [B|1][Hq|1][Sq|1][Skv|1], four zeros where the call has
# none; then bias_requires_grad: 1 where the backward returns dBias (the tensor "d_bias", shaped
# like the bias), else 0.
PROBLEM_FIELDS = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim_qk", "head_dim_v", "dtype", "scale", "softcap",
                  "q_offset", "kv_offset", "full_seq_q", "full_seq_kv")
DTYPE_NAMES = ("fp32", "fp16", "bf16")  # the problem's dtype (harness DType)
TENSOR = struct.Struct("<12q")  # name, type, ndim, offset (bytes), sizes[4], strides[4] (elements)
# A tensor's name is its index here: the wire columns of harness/tensors.def (tests/tensor_names_test.py).
TENSOR_NAMES = ("q", "k", "v", "o", "lse", "mask", "d_out", "d_lse", "d_q", "d_k", "d_v", "bias", "d_bias")
TYPE_NAMES = ("fp32", "fp16", "bf16", "u8")  # a tensor's element type (ShmType)

_MAGIC = b"AF1 "
_HEADER_LEN = 49
# attnfuzz drops a frame whose payload is larger (harness/worker_frame.h, kMaxFramePayload), as
# it drops any bytes that are not a frame: a larger reply would look like a hang.
MAX_PAYLOAD = 16 << 20


_FNV_PRIME = 1099511628211
_FNV_MASK = 0xFFFFFFFFFFFFFFFF


def _fnv(h: int, data: bytes) -> int:
    # FNV-1a mod 2^64, reduced every 8 bytes rather than every byte: XOR with a byte touches only
    # the low bits and the product's low 64 bits depend only on the factors' low 64 bits, so the
    # result is the same (reducing less often would grow the numbers into slow multiplications).
    for i in range(0, len(data), 8):
        for ch in data[i:i + 8]:
            h = (h ^ ch) * _FNV_PRIME
        h &= _FNV_MASK
    return h & _FNV_MASK


_FNV_AFTER_KIND = {k: _fnv(1469598103934665603, k) for k in (b"R", b"P", b"Q")}  # the sum's constant start


def _frame_sum(kind: bytes, seq: int, payload: bytes) -> int:
    start = _FNV_AFTER_KIND.get(kind)
    return _fnv(_fnv(1469598103934665603, kind) if start is None else start, seq.to_bytes(8, "little") + payload)


def encode_frame(kind: str, seq: int, payload: bytes) -> bytes:
    k = kind.encode()
    header = b"AF1 %s %016x %08x %016x\n" % (k, seq, len(payload), _frame_sum(k, seq, payload))
    return header + payload


class Channel:
    """Requests in, replies out, on the descriptors attnfuzz set up (ATTNFUZZ_WORKER_FDS)."""

    def __init__(self):
        fds = os.environ.pop("ATTNFUZZ_WORKER_FDS", None)
        if not fds:
            raise RuntimeError("the attnfuzz_py worker is started by attnfuzz (py: backends), not by hand")
        self._in, self._out = (int(x) for x in fds.split(","))
        os.set_inheritable(self._in, False)
        os.set_inheritable(self._out, False)
        self._buf = b""
        self._seq = 0
        self._write_lock = threading.Lock()  # replies (main thread) and compiling frames (attnfuzz_py.compiling's thread)

    def next_request(self):
        """The next request's payload (bytes), or None when attnfuzz closed the pipe.

        The checksum is not checked (see the module's doc): the header gives kind and length."""
        while True:
            buf = self._buf
            at = buf.find(_MAGIC)
            if at > 0:
                buf = self._buf = buf[at:]
            if at >= 0 and len(buf) >= _HEADER_LEN:
                n = int(buf[23:31], 16)
                if len(buf) >= _HEADER_LEN + n:
                    payload = buf[_HEADER_LEN:_HEADER_LEN + n]
                    self._buf = buf[_HEADER_LEN + n:]
                    if buf[4:5] == b"Q":
                        self._seq = int(buf[6:22], 16)
                        return payload
                    continue
            chunk = os.read(self._in, 1 << 16)  # under malloc's mmap threshold: no mmap/munmap per read
            if not chunk:
                return None
            self._buf += chunk

    def reply(self, payload: bytes):
        if len(payload) > MAX_PAYLOAD:  # said at once, as an error reply, instead of dropped
            payload = json.dumps({"ok": False, "protocol": PROTOCOL_VERSION,
                                  "error": f"the adapter's reply is {len(payload)} bytes, over the {MAX_PAYLOAD} bytes a frame "
                                           "may carry (a huge exception message?)"}).encode()
        self._send("R", payload)

    def progress(self, payload: bytes):
        """A progress frame of the current request (a compiling notice: attnfuzz_py.compiling)."""
        self._send("P", payload)

    def _send(self, kind, payload):
        with self._write_lock:
            view = memoryview(encode_frame(kind, self._seq, payload))
            while view:
                n = os.write(self._out, view)
                view = view[n:]


_DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "u8": np.dtype(np.uint8), "bf16": np.dtype(np.uint16)}


def _torch_dtype(name):
    def get():
        import torch  # only adapters that use torch import it
        return getattr(torch, name)
    return get


_TORCH_DTYPES = {"fp32": _torch_dtype("float32"), "fp16": _torch_dtype("float16"), "u8": _torch_dtype("uint8"),
                 "bf16": _torch_dtype("bfloat16")}


class SharedMemory:
    """The attnfuzz process's shared memory, mapped here; remapped when attnfuzz grew it."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_RDWR)
        self._map = None
        self._size = 0

    def ensure(self, size: int) -> bool:
        """Maps at least `size` bytes; True when the mapping changed (views of the old one are stale)."""
        if size <= self._size:
            return False
        # The old mapping is dropped, not closed: views of it may still be alive.
        self._map = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._bytes = np.frombuffer(self._map, np.uint8)  # views of an array are cheaper than of the mmap
        self._size = size
        self._torch_bases = {}  # dtype -> a torch tensor over the whole new mapping, made on first use
        return True

    def view(self, offset: int, dtype: str, shape, strides) -> np.ndarray:
        """A zero-copy numpy view of one tensor (offset in bytes, strides in elements).

        bf16 is viewed as uint16 bits (numpy has no bfloat16); see tensors.as_torch."""
        dt = _DTYPES[dtype]
        if 0 in shape:
            return np.zeros(shape, dt)
        n = dt.itemsize
        return np.ndarray(shape, dt, buffer=self._bytes, offset=offset, strides=[s * n for s in strides])

    def torch_view(self, offset: int, dtype: str, shape, strides):
        """The same view as a torch tensor, straight from one typed tensor over the whole mapping
        (cheaper than numpy's view and torch.from_numpy of it). Offsets are multiples of the
        element size (backends/shared_tensors.h aligns buffers to 64 bytes)."""
        base = self._torch_bases.get(dtype)
        if base is None:
            import torch
            if not self._torch_bases:
                self._torch_bases["u8"] = torch.frombuffer(self._map, dtype=torch.uint8)
            base = self._torch_bases[dtype] = self._torch_bases["u8"].view(_TORCH_DTYPES[dtype]())
        return base.as_strided(shape, strides, offset // _DTYPES[dtype].itemsize)


class TextCache:
    """The last few values made from request bytes, keyed by those bytes (oldest dropped first).
    An OrderedDict: a plain dict's first key after many deletions is found by a scan."""

    def __init__(self, capacity: int = 16):
        self._items = collections.OrderedDict()
        self._capacity = capacity

    def get(self, text: bytes, make=None):
        """The value kept for `text`, else make(text), kept (make=None: None)."""
        value = self._items.get(text)
        if value is None and make is not None:
            value = self.put(text, make(text))
        return value

    def put(self, text: bytes, value):
        if len(self._items) >= self._capacity:
            self._items.popitem(last=False)
        self._items[text] = value
        return value

    def clear(self):
        self._items.clear()


def read_request(payload: bytes):
    """A binary request: (version, op name, shm_size, problem entry + extra (bytes), tensor table
    (bytes: TENSOR.size per tensor)). The bytes are the keys of what the worker keeps."""
    version, op, shm_size, n, extra_len = HEADER.unpack_from(payload)
    if version != PROTOCOL_VERSION:
        return version, None, 0, b"", b""
    at = HEADER.size + PROBLEM.size
    end = at + n * TENSOR.size
    return version, OPS.get(op, op), shm_size, payload[HEADER.size:at] + payload[end:end + extra_len], payload[at:end]


def problem_fields(problem: bytes) -> dict:
    """The problem's fields (those of the C ABI's af_problem, bias_shape: None or the bias's
    extents, and bias_requires_grad) from its binary entry and its extra; the mask expression and
    the bands stay JSON text in "extra" until an adapter reads them (Problem.mask_expr)."""
    words = PROBLEM.unpack_from(problem)
    fields = dict(zip(PROBLEM_FIELDS, words))
    n = len(PROBLEM_FIELDS)
    bias_shape = words[n:n + 4]
    fields["bias_shape"] = bias_shape if any(bias_shape) else None
    fields["bias_requires_grad"] = bool(words[n + 4])
    fields["dtype"] = DTYPE_NAMES[fields["dtype"]]
    if fields["softcap"] != fields["softcap"]:  # NaN: none
        fields["softcap"] = None
    fields["extra"] = problem[PROBLEM.size:]
    return fields


def tensor_entry(entry: bytes):
    """(name, offset in bytes, type, shape, strides) of one tensor table entry."""
    w = TENSOR.unpack(entry)
    ndim = w[2]
    return TENSOR_NAMES[w[0]], w[3], TYPE_NAMES[w[1]], w[4:4 + ndim], w[8:8 + ndim]


def encode_request(op: str, shm_size: int, fields: dict, tensors, mask_expr=None, restrictions=()):
    """A binary request as attnfuzz writes it (backends/python_bridge_protocol.cpp), for tests and
    benchmarks of the worker without attnfuzz. tensors: (name, offset, type, shape, strides);
    fields may hold bias_shape (None: no bias) and bias_requires_grad (default False)."""
    import json
    extra = json.dumps({"mask": mask_expr or {"kind": "none"}, "restrictions": list(restrictions)}).encode()
    op_code = {v: k for k, v in OPS.items()}[op]
    out = HEADER.pack(PROTOCOL_VERSION, op_code, shm_size, len(tensors), len(extra))
    values = dict(fields, dtype=DTYPE_NAMES.index(fields["dtype"]),
                  softcap=float("nan") if fields.get("softcap") is None else fields["softcap"])
    out += PROBLEM.pack(*(values[f] for f in PROBLEM_FIELDS), *(fields.get("bias_shape") or (0, 0, 0, 0)),
                        int(bool(fields.get("bias_requires_grad"))))
    for name, offset, type_name, shape, strides in tensors:
        pad = [0] * (4 - len(shape))
        out += TENSOR.pack(TENSOR_NAMES.index(name), TYPE_NAMES.index(type_name), len(shape), offset,
                           *shape, *pad, *strides, *pad)
    return out + extra
