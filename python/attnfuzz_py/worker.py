"""The Python worker behind a py: backend (backends/python_backend.h): started once by attnfuzz,
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
_TRACEBACK_LINE_CHARS = 500  # a line may quote a huge exception message: the reply stays a few KB
OUTPUT_NAMES = ("O", "LSE", "dQ", "dK", "dV", "dBias")  # harness/tensors.h's kOutputs, for nondeterministic_outputs


class _Tensor:
    """One tensor table entry (protocol.tensor_entry) and its views, kept while the shared
    memory's mapping lasts and made on first use. An adapter gets a fresh alias of a view each
    call, so whatever it does to the tensor object (requires_grad_, say) stays in that call."""
    __slots__ = ("name", "dtype", "_where", "_shm", "_numpy", "_torch")

    def __init__(self, shm, entry):
        self.name, offset, self.dtype, shape, strides = protocol.tensor_entry(entry)
        self._where = (offset, self.dtype, shape, strides)
        self._shm = shm
        self._numpy = self._torch = None

    def numpy(self):
        if self._numpy is None:
            self._numpy = self._shm.view(*self._where)
        return self._numpy

    def torch(self):
        if self._torch is None:
            self._torch = self._shm.torch_view(*self._where)
        return self._torch


_TorchTensor = None  # torch.Tensor, once an adapter of torch tensors is loaded (numpy adapters never import torch)
_OK = b""  # the reply "ok, nothing to say" (supported; no stats): the frame's checksum costs ~0.5 us a byte in Python


def _library_versions():
    """The installed versions of the libraries an adapter is most likely built on, read from the
    package metadata (nothing is imported): recorded with every finding of the adapter."""
    from importlib import metadata
    out = {}
    for dist in ("torch", "triton", "jax", "jaxlib", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


class _Worker:
    def __init__(self, shm_path):
        self.shm = protocol.SharedMemory(shm_path)
        self.adapter = None
        self.problems = protocol.TextCache()  # problem entry + extra -> its fields (a forward and its backward share one)
        self.tables = protocol.TextCache()  # tensor table -> {name: _Tensor} (a problem called again)
        self.tensors = protocol.TextCache(64)  # tensor entry -> _Tensor (a backward shares its forward's q, k, v, o, lse, mask)

    def hello(self, r):
        global _TorchTensor
        module = importlib.import_module(r["module"])
        if not hasattr(module, r["class"]):
            raise AttributeError(f"{r['module']}:{r['class']}: module {r['module']} ({getattr(module, '__file__', '?')}) "
                                 f"has no attribute {r['class']}")
        cls = getattr(module, r["class"])
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise TypeError(f"{r['module']}:{r['class']} is not an attnfuzz_py.Adapter subclass")
        a = cls(**r.get("options", {}))
        self.adapter = a
        if a.tensors == "torch":
            import torch
            _TorchTensor = torch.Tensor
        nondeterministic = list(a.nondeterministic_outputs)
        unknown = [t for t in nondeterministic if t not in OUTPUT_NAMES]
        if isinstance(a.nondeterministic_outputs, str) or unknown:
            raise ValueError(f"nondeterministic_outputs: {a.nondeterministic_outputs!r}: expected a tuple of "
                             f"{', '.join(OUTPUT_NAMES)}")
        # Read at reply time: the number this package really speaks.
        return {"protocol": protocol.PROTOCOL_VERSION, "name": a.name, "version": a.version or "",
                "device": a.device, "contracts": dict(a.contracts), "backward_takes_dlse": bool(a.backward_takes_dlse),
                "masked_rows_zero": bool(a.masked_rows_zero), "returns_lse": bool(a.returns_lse),
                "nondeterministic_outputs": nondeterministic, "why_nondeterministic": str(a.why_nondeterministic),
                "batch_invariant": bool(a.batch_invariant), "mixes_batch_entries": bool(a.mixes_batch_entries),
                "envelope": a.envelope, "api": a.api,
                # Without its own supports() every problem is supported: attnfuzz then asks nothing.
                "checks_support": type(a).supports is not Adapter.supports,
                "python": platform.python_version(), "libraries": _library_versions()}

    def _problem(self, key, mask=None, bias=None):
        # A fresh Problem each call (adapters may hang things on it); the fields are shared.
        fields = self.problems.get(key)
        if fields is None:
            fields = self.problems.put(key, protocol.problem_fields(key))
        return Problem(fields, mask, bias)

    def _tensors(self, shm_size, table):
        """name -> _Tensor of each entry of the tensor table."""
        if self.shm.ensure(shm_size):
            self.tables.clear()
            self.tensors.clear()
        t = self.tables.get(table)
        if t is not None:
            return t
        step = protocol.TENSOR.size
        entries = [table[i:i + step] for i in range(0, len(table), step)]
        get, t, missing = self.tensors.get, {}, []
        for entry in entries:  # the kept ones first: a table with more new entries than the cache holds still gets all
            x = get(entry)
            if x is None:
                missing.append(entry)
            else:
                t[x.name] = x
        for entry in missing:
            x = self.tensors.put(entry, _Tensor(self.shm, entry))
            t[x.name] = x
        return self.tables.put(table, t)

    def _inputs(self, t, names):
        a = self.adapter
        if a.tensors == "numpy":
            return [as_numpy(t[n].numpy().view(), t[n].dtype) if n in t else None for n in names]
        if a.device == "cpu":  # an alias of the kept view (detach: nothing the adapter does to it reaches the next call)
            return [t[n].torch().detach() if n in t else None for n in names]
        return [to_device(t[n].torch().detach(), a.device) if n in t else None for n in names]

    def _write(self, t, outputs):
        a = self.adapter
        for name, value in outputs:
            x = t[name]
            if a.tensors == "torch" and type(value) is _TorchTensor:  # the common case, inline: the shape checked, one copy_
                target = x.torch()
                if value.shape != target.shape:
                    raise ValueError(f"{a.name}: {name} has shape {list(value.shape)}, expected {list(target.shape)}")
                target.copy_(value.detach() if value.requires_grad else value)
            elif a.tensors == "torch":  # a numpy result is copied through the numpy view
                write_result(x.numpy() if isinstance(value, np.ndarray) else None, x.dtype, value, f"{a.name}: {name}", a.tensors, x.torch())
            else:
                write_result(x.numpy(), x.dtype, value, f"{a.name}: {name}", a.tensors)

    def _call_problem(self, key, t):
        # The mask's view, and the bias as the adapter's tensors come (a copy on a GPU), made if
        # the adapter reads them.
        mask = t.get("mask")
        bias = (lambda: self._inputs(t, ("bias",))[0]) if "bias" in t else None
        return self._problem(key, None if mask is None else mask.numpy, bias)

    def forward(self, shm_size, key, table):
        t = self._tensors(shm_size, table)
        q, k, v = self._inputs(t, ("q", "k", "v"))
        o, lse = self.adapter.forward(self._call_problem(key, t), q, k, v)
        if lse is None and self.adapter.returns_lse:
            raise ValueError("forward returned no LSE, but the adapter declares returns_lse")
        self._write(t, (("o", o), ("lse", lse)) if lse is not None else (("o", o),))

    def backward(self, shm_size, key, table):
        t = self._tensors(shm_size, table)
        ins = self._inputs(t, ("q", "k", "v", "o", "lse", "d_out", "d_lse"))
        p = self._call_problem(key, t)
        if p.bias_requires_grad and "d_bias" not in t:
            raise RuntimeError("the problem asks for dBias but the request has no d_bias tensor: a bridge bug")
        self._write(t, _gradients(self.adapter.name, p, self.adapter.backward(p, *ins)))

    def handle(self, payload):
        """The reply's JSON text (bytes) to one request."""
        if payload[:1] == b"{":  # hello, or a request of protocol 2 or older (JSON)
            r = json.loads(payload.split(b"\n", 1)[0])
            version, op = r.get("protocol"), r.get("op")
        else:
            version, op, shm_size, key, table = protocol.read_request(payload)
        if version != protocol.PROTOCOL_VERSION:
            raise RuntimeError(f"attnfuzz speaks bridge protocol {version}, this attnfuzz_py speaks "
                               f"{protocol.PROTOCOL_VERSION}")
        if op == "hello":  # imports (torch) and the constructor: not run time either
            if payload[:1] != b"{":
                raise ValueError("hello is a JSON request")
            with compile_time.compiling():
                return _json_ok(self.hello(r))
        if payload[:1] == b"{":
            raise ValueError(f"'{op}' as JSON: bridge protocol {protocol.PROTOCOL_VERSION} sends it binary")
        if self.adapter is None:
            raise RuntimeError(f"'{op}' before hello")
        if op == "supports":
            reason = self.adapter.supports(self._problem(key))
            return _OK if reason is None else _json_ok({"reason": str(reason)})  # empty: supported
        if op in ("forward", "backward"):
            getattr(self, op)(shm_size, key, table)
            stats = self.adapter.stats()
            return _json_ok({"stats": stats}) if stats else _OK
        raise ValueError(f"unknown request '{op}'")


def _gradients(name, p, grads):
    """The backward's results as (wire name, value): (dQ, dK, dV), and dBias where the call asks
    for it (p.bias_requires_grad). A dBias that was not asked for may come as a fourth None; any
    other count is the adapter's error, said at once rather than as a wrong gradient."""
    try:
        grads = tuple(grads)
        n = len(grads)
    except TypeError:  # not iterable: said below by its type
        n = None
    if p.bias_requires_grad:
        if n != 4 or grads[3] is None:
            got = "None for dBias" if n == 4 else f"{n} values" if n is not None else type(grads).__name__
            raise ValueError(f"{name}: backward returned {got}, but this call asks for dBias (p.bias_requires_grad, "
                             "the adapter's envelope declares bias_grad): return (dQ, dK, dV, dBias), dBias shaped like p.bias")
        return ("d_q", grads[0]), ("d_k", grads[1]), ("d_v", grads[2]), ("d_bias", grads[3])
    if n == 3 or (n == 4 and grads[3] is None):
        return ("d_q", grads[0]), ("d_k", grads[1]), ("d_v", grads[2])
    got = f"{n} values" if n is not None else type(grads).__name__
    raise ValueError(f"{name}: backward returned {got}, expected (dQ, dK, dV) (this call asks for no dBias)")


def _json_ok(reply):
    reply["ok"] = True
    return json.dumps(reply, separators=(",", ":")).encode()


def _error(e):
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    text = "".join(lines).rstrip().splitlines()
    return {"ok": False, "protocol": protocol.PROTOCOL_VERSION, "error": f"{type(e).__name__}: {e}".splitlines()[0][:2000],
            "traceback": "\n".join(line[:_TRACEBACK_LINE_CHARS] for line in text[-_TRACEBACK_LINES:])}


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
        except Exception as e:  # noqa: BLE001 - every error goes back to attnfuzz
            reply = json.dumps(_error(e), separators=(",", ":")).encode()
        finally:
            compile_time.end_call()
        sys.stdout.flush()
        channel.reply(reply)
