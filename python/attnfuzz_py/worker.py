"""The Python worker behind a py: backend (oracles/python_backend.h): started once by attnfuzz,
it loads one adapter and answers hello, supports, forward and backward until attnfuzz closes
the pipe. An exception is answered as an error with the traceback's last lines; the worker
goes on with the next request.
"""
import importlib
import json
import platform
import sys
import traceback

import numpy as np

from . import compile_time, protocol
from .adapter import Adapter, Problem
from .tensors import as_numpy, to_device, write_result

_TRACEBACK_LINES = 12


class _Tensor:
    """One tensor line, ["name", offset, "dtype", shape, strides], and its views, kept while the
    shared memory's mapping lasts and made on first use. An adapter gets a fresh alias of a view
    each call, so whatever it does to the tensor object (requires_grad_, say) stays in that call."""

    def __init__(self, shm, fields):
        self.name, self._offset, self.dtype, self._shape, self._strides = fields
        self._shm = shm
        self._numpy = self._torch = None

    def numpy(self):
        if self._numpy is None:
            self._numpy = self._shm.view(self._offset, self.dtype, self._shape, self._strides)
        return self._numpy

    def torch(self):
        if self._torch is None:
            self._torch = self._shm.torch_view(self._offset, self.dtype, self._shape, self._strides)
        return self._torch


class _Worker:
    def __init__(self, shm_path):
        self.shm = protocol.SharedMemory(shm_path)
        self.adapter = None
        self.problems = protocol.TextCache()  # problem text -> its fields (a forward and its backward share one)
        self.tensors = protocol.TextCache(64)  # tensor line -> _Tensor (a backward shares its forward's q, k, v, o, lse, mask)
        self.envelopes = protocol.TextCache()  # {protocol, op, shm_size} repeat call after call

    def hello(self, r):
        module = importlib.import_module(r["module"])
        cls = getattr(module, r["class"], None)
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise TypeError(f"{r['module']}:{r['class']} is not an attnfuzz_py.Adapter subclass")
        a = cls(**r.get("options", {}))
        self.adapter = a
        # Read at reply time: the number this package really speaks.
        return {"protocol": protocol.PROTOCOL_VERSION, "name": a.name, "version": a.version or "",
                "device": a.device, "contracts": dict(a.contracts), "backward_takes_dlse": bool(a.backward_takes_dlse),
                "masked_rows_zero": bool(a.masked_rows_zero), "returns_lse": bool(a.returns_lse),
                # Without its own supports() every problem is supported: attnfuzz then asks nothing.
                "checks_support": type(a).supports is not Adapter.supports,
                "python": platform.python_version()}

    def _problem(self, text, mask=None):
        # A fresh Problem each call (adapters may hang things on it); the parsed fields are shared.
        return Problem(self.problems.get(text, json.loads), mask)

    def _inputs(self, r, problem, lines, names):
        if self.shm.ensure(r["shm_size"]):
            self.tensors.clear()
        found = {line: self.tensors.get(line) for line in lines}
        missing = [line for line, x in found.items() if x is None]
        if missing:  # one json.loads for all of them: each call of it costs more than its parsing
            for line, fields in zip(missing, json.loads(b"[" + b",".join(missing) + b"]")):
                found[line] = self.tensors.put(line, _Tensor(self.shm, fields))
        t = {x.name: x for x in found.values()}
        a = self.adapter

        def convert(n):
            if n not in t:
                return None
            if a.tensors == "numpy":
                return as_numpy(t[n].numpy().view(), t[n].dtype)
            return to_device(t[n].torch().detach(), a.device)
        mask = t.get("mask")
        return self._problem(problem, None if mask is None else mask.numpy().view()), t, [convert(n) for n in names]

    def _write(self, t, outputs):
        a = self.adapter
        for name, value in outputs:
            x = t[name]
            if a.tensors == "torch":  # a numpy result is copied through the numpy view
                write_result(x.numpy() if isinstance(value, np.ndarray) else None, x.dtype, value, f"{a.name}: {name}", a.tensors, x.torch())
            else:
                write_result(x.numpy(), x.dtype, value, f"{a.name}: {name}", a.tensors)

    def forward(self, r, problem, lines):
        p, t, (q, k, v) = self._inputs(r, problem, lines, ["q", "k", "v"])
        o, lse = self.adapter.forward(p, q, k, v)
        if lse is None and self.adapter.returns_lse:
            raise ValueError("forward returned no LSE, but the adapter declares returns_lse")
        self._write(t, [("o", o)] + ([("lse", lse)] if lse is not None else []))
        return {}

    def backward(self, r, problem, lines):
        names = ["q", "k", "v", "o", "lse", "d_out", "d_lse"]
        p, t, ins = self._inputs(r, problem, lines, names)
        dq, dk, dv = self.adapter.backward(p, *ins)
        self._write(t, [("d_q", dq), ("d_k", dk), ("d_v", dv)])
        return {}

    def handle(self, payload):
        envelope, problem, lines = protocol.split_request(payload)
        r = self.envelopes.get(envelope, json.loads)  # never changed below: a cached one is safe to share
        if r.get("protocol") != protocol.PROTOCOL_VERSION:
            raise RuntimeError(f"attnfuzz speaks bridge protocol {r.get('protocol')}, this attnfuzz_py speaks "
                               f"{protocol.PROTOCOL_VERSION}")
        op = r["op"]
        if op == "hello":  # imports (torch) and the constructor: not run time either
            with compile_time.compiling():
                return self.hello(r)
        if self.adapter is None:
            raise RuntimeError(f"'{op}' before hello")
        if op == "supports":
            reason = self.adapter.supports(self._problem(problem))
            return {"reason": None if reason is None else str(reason)}
        if op in ("forward", "backward"):
            out = getattr(self, op)(r, problem, lines)
            stats = self.adapter.stats()
            if stats:  # left out when empty: every reply byte costs its checksum in Python
                out["stats"] = stats
            return out
        raise ValueError(f"unknown request '{op}'")


def _error(e):
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    text = "".join(lines).rstrip().splitlines()
    return {"ok": False, "protocol": protocol.PROTOCOL_VERSION, "error": f"{type(e).__name__}: {e}".splitlines()[0][:2000],
            "traceback": "\n".join(text[-_TRACEBACK_LINES:])}


def main(argv):
    channel = protocol.Channel()
    compile_time.attach(channel)
    worker = _Worker(argv[0])
    while True:
        req = channel.next_request()
        if req is None:
            return
        try:
            reply = worker.handle(req)
            reply["ok"] = True
        except Exception as e:  # noqa: BLE001 - every error goes back to attnfuzz
            reply = _error(e)
        sys.stdout.flush()
        channel.reply(json.dumps(reply, separators=(",", ":")).encode())
