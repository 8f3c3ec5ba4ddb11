"""The Python worker behind a py: backend (oracles/python_backend.h): started once by attnfuzz,
it loads one adapter and answers hello, supports, forward and backward until attnfuzz closes
the pipe. An exception is answered as an error with the traceback's last lines; the worker
goes on with the next request.
"""
import importlib
import json
import platform
import sys
import time
import traceback

from . import protocol
from .adapter import Adapter, Problem
from .tensors import as_numpy, as_torch, to_device, write_result

_TRACEBACK_LINES = 12


class _Tensors:
    """The views of one tensor table, kept while the shared memory's mapping lasts: numpy views,
    and torch views made on first use (an adapter gets a fresh alias of them each call, so
    whatever it does to the tensor object, requires_grad_ say, stays with that call)."""

    def __init__(self, shm, text):
        table = json.loads(text)
        self.views = {n: shm.view(d) for n, d in table.items()}
        self.dtypes = {n: d["dtype"] for n, d in table.items()}
        self._torch = {}

    def torch(self, name):
        t = self._torch.get(name)
        if t is None:
            t = self._torch[name] = as_torch(self.views[name], self.dtypes[name])
        return t


class _Worker:
    def __init__(self, shm_path):
        self.shm = protocol.SharedMemory(shm_path)
        self.adapter = None
        self.problems = protocol.TextCache()  # problem text -> its fields (a forward and its backward share one)
        self.tables = protocol.TextCache()    # tensor table text -> _Tensors
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
                "python": platform.python_version()}

    def _problem(self, text, mask=None):
        # A fresh Problem each call (adapters may hang things on it); the parsed fields are shared.
        return Problem(self.problems.get(text, json.loads), mask)

    def _inputs(self, r, problem, table, names):
        if self.shm.ensure(r["shm_size"]):
            self.tables.clear()
        t = self.tables.get(table, lambda text: _Tensors(self.shm, text))
        a = self.adapter

        def convert(n):
            if n not in t.views:
                return None
            if a.tensors == "numpy":
                return as_numpy(t.views[n].view(), t.dtypes[n])  # a fresh alias, as for torch
            return to_device(t.torch(n).detach(), a.device)
        mask = t.views.get("mask")
        return self._problem(problem, None if mask is None else mask.view()), t, [convert(n) for n in names]

    def _write(self, t, outputs):
        for name, value in outputs:
            write_result(t.views[name], t.dtypes[name], value, f"{self.adapter.name}: {name}", self.adapter.tensors,
                         t.torch(name) if self.adapter.tensors == "torch" else None)

    def forward(self, r, problem, table):
        p, t, (q, k, v) = self._inputs(r, problem, table, ["q", "k", "v"])
        o, lse = self.adapter.forward(p, q, k, v)
        if lse is None and self.adapter.returns_lse:
            raise ValueError("forward returned no LSE, but the adapter declares returns_lse")
        self._write(t, [("o", o)] + ([("lse", lse)] if lse is not None else []))
        return {}

    def backward(self, r, problem, table):
        names = ["q", "k", "v", "o", "lse", "d_out", "d_lse"]
        p, t, ins = self._inputs(r, problem, table, names)
        dq, dk, dv = self.adapter.backward(p, *ins)
        self._write(t, [("d_q", dq), ("d_k", dk), ("d_v", dv)])
        return {}

    def handle(self, payload):
        envelope, problem, table = protocol.split_request(payload)
        r = self.envelopes.get(envelope, json.loads)  # never changed below: a cached one is safe to share
        if r.get("protocol") != protocol.PROTOCOL_VERSION:
            raise RuntimeError(f"attnfuzz speaks bridge protocol {r.get('protocol')}, this attnfuzz_py speaks "
                               f"{protocol.PROTOCOL_VERSION}")
        op = r["op"]
        if op == "hello":
            return self.hello(r)
        if self.adapter is None:
            raise RuntimeError(f"'{op}' before hello")
        if op == "supports":
            reason = self.adapter.supports(self._problem(problem))
            return {"reason": None if reason is None else str(reason)}
        if op in ("forward", "backward"):
            t0 = time.perf_counter()
            out = getattr(self, op)(r, problem, table)
            stats = {"python_s": round(time.perf_counter() - t0, 6)}
            stats.update(self.adapter.stats() or {})
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
