"""The worker's side of the bridge protocol (oracles/python_bridge_protocol.h).

Frames are those of harness/worker_protocol.h:

    "AF1 " kind ' ' seq(16 hex) ' ' length(8 hex) ' ' fnv1a64(kind, seq, payload)(16 hex) '\\n' payload

with small JSON payloads. Tensor data is never in a frame: it lies in one shared memory
region (a memfd of the attnfuzz process, opened through /proc), and a request says where each
tensor starts (bytes), its dtype, shape and strides (elements). Views of it are zero-copy.
"""
import mmap
import os

import numpy as np

# Bumped on any change of the messages' meaning; oracles/python_bridge_protocol.h has the same number.
PROTOCOL_VERSION = 1

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

    def next_request(self):
        """The next request's payload (bytes), or None when attnfuzz closed the pipe."""
        while True:
            at = self._buf.find(_MAGIC)
            if at > 0:
                self._buf = self._buf[at:]
            if at >= 0 and len(self._buf) >= _HEADER_LEN:
                h = self._buf[:_HEADER_LEN]
                kind, seq, n = h[4:5], int(h[6:22], 16), int(h[23:31], 16)
                if len(self._buf) >= _HEADER_LEN + n:
                    payload = self._buf[_HEADER_LEN:_HEADER_LEN + n]
                    self._buf = self._buf[_HEADER_LEN + n:]
                    if kind == b"Q" and int(h[32:48], 16) == _frame_sum(kind, seq, payload):
                        self._seq = seq
                        return payload
                    continue
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk

    def reply(self, payload: bytes):
        msg = encode_frame("R", self._seq, payload)
        view = memoryview(msg)
        while view:
            n = os.write(self._out, view)
            view = view[n:]


_DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "u8": np.dtype(np.uint8), "bf16": np.dtype(np.uint16)}


class SharedMemory:
    """The attnfuzz process's shared memory, mapped here; remapped when attnfuzz grew it."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_RDWR)
        self._map = None
        self._size = 0

    def ensure(self, size: int):
        if size > self._size:
            # The old mapping is dropped, not closed: views of it may still be alive.
            self._map = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._bytes = np.frombuffer(self._map, np.uint8)  # views of an array are cheaper than of the mmap
            self._size = size

    def view(self, desc) -> np.ndarray:
        """A zero-copy numpy view of one tensor: {offset, dtype, shape, strides}.

        bf16 is viewed as uint16 bits (numpy has no bfloat16); see tensors.as_torch."""
        dt = _DTYPES[desc["dtype"]]
        shape = desc["shape"]
        if 0 in shape:
            return np.zeros(shape, dt)
        n = dt.itemsize
        return np.ndarray(shape, dt, buffer=self._bytes, offset=desc["offset"], strides=[s * n for s in desc["strides"]])
