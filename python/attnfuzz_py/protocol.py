"""The worker's side of the bridge protocol (oracles/python_bridge_protocol.h).

Frames are those of harness/worker_protocol.h:

    "AF1 " kind ' ' seq(16 hex) ' ' length(8 hex) ' ' fnv1a64(kind, seq, payload)(16 hex) '\\n' payload

A request's payload is one small JSON document per line: the envelope ({protocol, op, ...}),
then, for supports, forward and backward, the problem, then, for forward and backward, the
tensor table. Tensor data is never in a frame: it lies in one shared memory region (a memfd of
the attnfuzz process, opened through /proc), and the table says where each tensor starts
(bytes), its dtype, shape and strides (elements). Views of it are zero-copy.

Speed (docs/python-backends.md, "Speed"): a byte-wise checksum costs about 0.3 us a byte in
Python, so the worker does not check the requests' checksums (only attnfuzz holds the write end
of the request pipe: nothing else can put bytes there) and keeps its replies short; attnfuzz
checks every reply's. The problem and the tensor table arrive as text: the worker keeps the
last few it parsed, keyed by that text, with their views (a forward and its backward share the
problem; a campaign repeats layouts).
"""
import mmap
import os
import threading

import numpy as np

# Bumped on any change of the messages' meaning; oracles/python_bridge_protocol.h has the same number.
PROTOCOL_VERSION = 2

_MAGIC = b"AF1 "
_HEADER_LEN = 49


def _frame_sum(kind: bytes, seq: int, payload: bytes) -> int:
    h = 1469598103934665603
    for ch in kind + seq.to_bytes(8, "little") + payload:
        h = ((h ^ ch) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


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
        element size (oracles/shared_tensors.h aligns buffers to 64 bytes)."""
        base = self._torch_bases.get(dtype)
        if base is None:
            import torch
            if not self._torch_bases:
                self._torch_bases["u8"] = torch.frombuffer(self._map, dtype=torch.uint8)
            base = self._torch_bases[dtype] = self._torch_bases["u8"].view(_TORCH_DTYPES[dtype]())
        return base.as_strided(shape, strides, offset // _DTYPES[dtype].itemsize)


class TextCache:
    """The last few values parsed from request text, keyed by the text (oldest dropped first)."""

    def __init__(self, capacity: int = 16):
        self._items = {}
        self._capacity = capacity

    def get(self, text: bytes, make=None):
        """The value kept for `text`, else make(text), kept (make=None: None)."""
        value = self._items.get(text)
        if value is None and make is not None:
            value = self.put(text, make(text))
        return value

    def put(self, text: bytes, value):
        if len(self._items) >= self._capacity:
            del self._items[next(iter(self._items))]
        self._items[text] = value
        return value

    def clear(self):
        self._items.clear()


def split_request(payload: bytes):
    """(envelope, problem or None, [tensor lines]) as text: one JSON document a line."""
    lines = payload.split(b"\n")
    return lines[0], (lines[1] if len(lines) > 1 else None), lines[2:]
