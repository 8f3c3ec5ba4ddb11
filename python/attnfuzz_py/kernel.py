"""@kernel: a plain attention function as an attnfuzz backend, without writing an Adapter
(docs/testing-python-kernels.md).

    import attnfuzz_py, torch

    @attnfuzz_py.kernel(contracts={"fp32": "fp32"})
    def my_attention(q, k, v, *, scale, mask=None):
        ...                                  # torch ops or your kernel's autograd.Function
        return o, lse

`my_attention` becomes an Adapter subclass, the backend `py:MODULE:my_attention`; called with
tensors it is still the function. The function gets q [B][H][Sq][Dqk], k [B][H][Skv][Dqk],
v [B][H][Skv][Dv] in the case dtype (K and V repeated to the query heads under GQA unless
grouped_heads="native"), `scale`, and, by the arguments it declares:

- `mask`: the dense bool mask [B][Hq][Sq][Skv] (True = visible), or None where every key is visible;
- `causal` (instead of `mask`): True for a top-left causal call with Sq = Skv, False for an
  unmasked one; every other mask is declined (and campaigns aim at these two);
- `softcap`: None or c (S = c * tanh(S / c)); without the argument, softcapped cases are declined;
- `bias`: None or the score bias [B|1][Hq|1][Sq|1][Skv|1] in the case dtype, on `device`, added
  after the softcap and before the mask, broadcast over its dimensions of extent 1; without the
  argument, cases with a bias are declined. Where a case asks for dBias, autograd's backward
  hands the function a leaf bias that requires grad and returns its gradient (the envelope
  declares bias_grad unless you say otherwise); a backward= function returns it as a fourth value;
- any other keyword argument: an option of the backend name (py:MODULE:NAME?block=64), a string.

It returns (o [B][Hq][Sq][Dv], lse [B][Hq][Sq], natural log), or o alone with returns_lse=False.
The backward is autograd's through the function, with dO and, unless backward_takes_dlse=False,
dLSE; or your own `backward=` function.
"""
import inspect

from .adapter import Adapter

PROBLEM_ARGUMENTS = ("scale", "mask", "causal", "softcap", "bias")
_REGISTERED = []


def registered_kernels():
    """Every class made by @kernel in this process, in definition order."""
    return list(_REGISTERED)


class _KernelClass(type):
    """A kernel called with tensors is the user's function; called with keywords only (the worker's
    KernelClass(**options)) it makes the adapter."""

    def __call__(cls, *args, **kwargs):
        if args:
            return cls.function(*args, **kwargs)
        return super().__call__(**kwargs)


class KernelAdapter(Adapter, metaclass=_KernelClass):
    """The Adapter behind a @kernel function; the decorator sets the class attributes."""

    function = None           # the user's forward
    backward_function = None  # the user's backward, or None: autograd through `function`
    supports_function = None  # the user's extra supports(p), or None
    mask_argument = None      # "mask", "causal" or None: how the function takes the mask
    takes_softcap = False
    takes_bias = False
    grouped_heads = "expand"  # or "native": K and V handed over with their own Hkv heads
    option_names = ()
    backend = None            # "py:MODULE:NAME", None where the function is not at module level

    def __init__(self, **options):
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            takes = ", ".join(self.option_names) or "none"
            raise ValueError(f"{self.name}: unknown option(s) {unknown}; the function's options: {takes}")
        self.options = options
        self._mask_kinds = {}

    # ------------------------------------------------------------ what it runs

    def supports(self, p):
        if p.softcap is not None and not self.takes_softcap:
            return f"{self.name} takes no softcap (its function has no softcap argument)"
        if p.bias_shape is not None and not self.takes_bias:
            return f"{self.name} takes no score bias (its function has no bias argument)"
        if self.mask_argument != "mask":
            kind, why = self._mask_kind(p)
            if kind is None:
                return f"{self.name} takes {self._masks_taken()}: {why}"
            if kind == "causal" and self.mask_argument != "causal":
                return f"{self.name} takes {self._masks_taken()}: this call's mask is causal"
        if self.supports_function is not None:
            return self.supports_function(p)
        return None

    def _masks_taken(self):
        if self.mask_argument == "causal":
            return "no mask or a top-left causal one with Sq = Skv (its function has a causal argument)"
        return "no mask (its function has no mask or causal argument)"

    def _mask_kind(self, p):
        """("none" | "causal", None) for the call's mask expression, or (None, why not)."""
        import json
        key = (json.dumps(p.mask_expr, sort_keys=True), json.dumps(p.restrictions, sort_keys=True), p.q_offset,
               p.kv_offset, p.full_seq_q, p.full_seq_kv, p.seq_q, p.seq_kv)
        if key not in self._mask_kinds:
            if len(self._mask_kinds) >= 256:
                self._mask_kinds.pop(next(iter(self._mask_kinds)))
            from .adapters.band_masks import expression_plane
            plane, why = expression_plane(p)
            self._mask_kinds[key] = (None, why) if plane is None else _plane_kind(plane)
        return self._mask_kinds[key]

    def _arguments(self, p, device, bias=None):
        """The function's keyword arguments; bias: the score bias to hand it (a leaf that
        requires grad), else p.bias."""
        kwargs = dict(self.options)
        kwargs["scale"] = p.scale
        if self.takes_softcap:
            kwargs["softcap"] = p.softcap
        if self.takes_bias:
            kwargs["bias"] = p.bias if bias is None else bias
        dense = p.mask
        all_visible = dense is None or bool(dense.all())
        if self.mask_argument == "mask":
            kwargs["mask"] = None if all_visible else p.dense_mask(device)
        elif not all_visible:
            import numpy as np
            plane = np.tril(np.ones((p.seq_q, p.seq_kv), dtype=bool))
            if not (self.mask_argument == "causal" and p.seq_q == p.seq_kv and (dense.astype(bool) == plane).all()):
                raise RuntimeError(f"attnfuzz_py: {self.name}: supports() took this call's mask, the dense mask "
                                   "disagrees: a bridge bug")
        if self.mask_argument == "causal":
            kwargs["causal"] = not all_visible
        return kwargs

    def _expanded(self, p, k, v):
        if self.grouped_heads == "native" or p.group == 1:
            return k, v
        # Repeated inside the autograd graph: the gradients of a kv head's group add up by themselves.
        return k.repeat_interleave(p.group, dim=1), v.repeat_interleave(p.group, dim=1)

    def _call(self, p, q, k, v, bias=None):
        k, v = self._expanded(p, k, v)
        result = self.function(q, k, v, **self._arguments(p, q.device, bias))
        if isinstance(result, (tuple, list)):
            if len(result) != 2:
                raise ValueError(f"{self.name}: the function returned {len(result)} values, expected (o, lse)")
            o, lse = result
        else:
            o, lse = result, None
        if self.returns_lse and lse is None:
            raise ValueError(f"{self.name}: the function returned no LSE; declare returns_lse=False if it has none")
        return o, (lse if self.returns_lse else None)

    def forward(self, p, q, k, v):
        import torch
        with torch.no_grad():
            return self._call(p, q, k, v)

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        if self.backward_function is not None:
            return self._explicit_backward(p, q, k, v, o, lse, d_o, d_lse)
        import torch
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        inputs = (q, k, v)
        bias = None
        if p.bias_requires_grad:  # a leaf of the bias's own (broadcast) shape: its gradient is dBias
            bias = p.bias.detach().requires_grad_()
            inputs += (bias,)
        with torch.enable_grad():
            o2, lse2 = self._call(p, q, k, v, bias)
        if not isinstance(o2, torch.Tensor) or o2.grad_fn is None:
            raise ValueError(f"{self.name}: the function's output has no autograd graph; make it differentiable "
                             "or give @kernel(backward=...)")
        outputs, grads = [o2], [d_o.to(o2.dtype)]
        if self.backward_takes_dlse:
            if lse2.grad_fn is None:
                raise ValueError(f"{self.name}: the LSE the function returns has no autograd graph, so its backward "
                                 "cannot take dLSE: declare backward_takes_dlse=False (attnfuzz then adds the dLSE "
                                 "term itself)")
            outputs.append(lse2)
            grads.append(d_lse.to(lse2.dtype))
        grads_in = torch.autograd.grad(outputs, inputs, grads, allow_unused=True)
        if bias is not None and grads_in[3] is None:
            raise ValueError(f"{self.name}: the bias has no autograd path to the function's outputs, so its dBias "
                             "cannot come from autograd: declare envelope={'bias_grad': False} (cases that ask for "
                             "dBias are then declined), or give @kernel(backward=...) returning dBias")
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads_in, inputs))

    def _explicit_backward(self, p, q, k, v, o, lse, d_o, d_lse):
        kx, vx = self._expanded(p, k, v)
        grads = self.backward_function(q, kx, vx, o, lse, d_o, d_lse, **self._arguments(p, q.device))
        if len(grads) not in (3, 4):
            raise ValueError(f"{self.name}: the backward returned {len(grads)} values, expected (dq, dk, dv) or "
                             "(dq, dk, dv, dbias)")
        dq, dk, dv = grads[:3]
        if kx is not k:  # the query heads of each kv head's group add up
            dk = dk.unflatten(1, (p.heads_kv, p.group)).sum(2)
            dv = dv.unflatten(1, (p.heads_kv, p.group)).sum(2)
        if p.bias_requires_grad:
            if len(grads) != 4 or grads[3] is None:
                raise ValueError(f"{self.name}: this case asks for dBias, and the backward returned none: return "
                                 "(dq, dk, dv, dbias), dbias shaped like the bias (or declare envelope={'bias_grad': False})")
            return dq, dk, dv, grads[3]
        return dq, dk, dv


def _plane_kind(plane):
    import numpy as np
    if plane.all():
        return "none", None
    sq, skv = plane.shape
    if sq == skv and np.array_equal(plane, np.tril(np.ones((sq, skv), dtype=bool))):
        return "causal", None
    return None, "this call's mask is neither none nor top-left causal with Sq = Skv"


def kernel(function=None, *, name=None, version="", contracts=None, returns_lse=True, backward_takes_dlse=None,
           masked_rows_zero=True, envelope=None, device="cpu", api=None, nondeterministic_outputs=(),
           why_nondeterministic="", batch_invariant=False, grouped_heads="expand", supports=None, backward=None):
    """Turn `function(q, k, v, *, scale, mask=None | causal=False, softcap=None, bias=None, **options)` into an
    attnfuzz backend (an Adapter subclass). The declarations are the Adapter's
    (docs/python-backends.md, "Semantics"):

    name: the backend is py.<name> (default: the function's name); version: recorded with findings
    contracts: numerics contract per dtype, e.g. {"fp32": "fp32", "bf16": "bf16"}; a dtype left
      out is unsupported (default {"fp32": "fp32"})
    returns_lse: the function returns (o, lse); False: o alone (no LSE compared, no LSE merge)
    backward_takes_dlse: the backward honours dLSE (default: returns_lse; autograd then needs a
      differentiable LSE); False: attnfuzz adds the dLSE term itself
    masked_rows_zero: fully masked rows give O = 0, LSE = -inf and zero gradients
    envelope: what campaigns aim at (docs/plugins.md, "Support envelope"); a causal argument adds
      masks="causal_or_none", no softcap argument softcap=False, a bias argument bias=True (and,
      with autograd's backward, bias_grad=True: dBias is the gradient of the bias handed in)
    device: "cpu" or "cuda", where the tensors are handed over
    api, nondeterministic_outputs, why_nondeterministic, batch_invariant: as the Adapter's
    grouped_heads: "expand" (K and V repeated to the query heads before the call) or "native"
      (the function takes Hkv < Hq heads itself; then dK and dV are its own)
    supports: an extra supports(p) -> None or the reason it declines p (an attnfuzz_py.Problem)
    backward: backward(q, k, v, o, lse, d_o, d_lse, *, scale, ...) -> (dq, dk, dv) instead of
      autograd (with grouped_heads="expand" it gets and returns Hq heads; they are summed here), or
      (dq, dk, dv, dbias) with dbias shaped like the bias where the case asks for dBias (only with
      envelope={"bias_grad": True}, which a backward= function must declare itself)
    """
    if function is None:
        return lambda f: kernel(f, name=name, version=version, contracts=contracts, returns_lse=returns_lse,
                                backward_takes_dlse=backward_takes_dlse, masked_rows_zero=masked_rows_zero,
                                envelope=envelope, device=device, api=api,
                                nondeterministic_outputs=nondeterministic_outputs,
                                why_nondeterministic=why_nondeterministic, batch_invariant=batch_invariant,
                                grouped_heads=grouped_heads,
                                supports=supports, backward=backward)
    params = inspect.signature(function).parameters
    if "scale" not in params:
        raise TypeError(f"@kernel: {function.__name__} must take a `scale` keyword argument")
    if "mask" in params and "causal" in params:
        raise TypeError(f"@kernel: {function.__name__} takes both `mask` and `causal`: take one of them")
    if grouped_heads not in ("expand", "native"):
        raise ValueError(f"@kernel: grouped_heads is 'expand' or 'native', got {grouped_heads!r}")
    if backward_takes_dlse is None:
        backward_takes_dlse = returns_lse
    if backward_takes_dlse and not returns_lse:
        raise ValueError("@kernel: backward_takes_dlse needs returns_lse (a backward takes dLSE of an LSE it returned)")
    keyword_kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [n for n, prm in params.items() if prm.kind is not inspect.Parameter.KEYWORD_ONLY][:3]
    options = tuple(n for n, prm in params.items()
                    if prm.kind in keyword_kinds and n not in PROBLEM_ARGUMENTS and n not in positional)
    mask_argument = "mask" if "mask" in params else "causal" if "causal" in params else None
    if backward is not None:
        _check_backward_arguments(function, backward, options)
    envelope = dict(envelope or {})
    if mask_argument == "causal":
        envelope.setdefault("masks", "causal_or_none")
    if "softcap" not in params:
        envelope.setdefault("softcap", False)
    if "bias" in params:
        envelope.setdefault("bias", True)
        if backward is None:  # autograd's backward returns dBias; a backward= function declares it itself
            envelope.setdefault("bias_grad", True)
    at_module_level = function.__qualname__ == function.__name__
    attrs = {
        "name": name or function.__name__, "version": version, "device": device, "tensors": "torch",
        "contracts": dict(contracts or {"fp32": "fp32"}), "returns_lse": bool(returns_lse),
        "backward_takes_dlse": bool(backward_takes_dlse), "masked_rows_zero": bool(masked_rows_zero),
        "envelope": envelope or None, "api": api, "nondeterministic_outputs": tuple(nondeterministic_outputs),
        "why_nondeterministic": why_nondeterministic, "batch_invariant": bool(batch_invariant),
        "function": staticmethod(function),
        "backward_function": None if backward is None else staticmethod(backward),
        "supports_function": None if supports is None else staticmethod(supports),
        "mask_argument": mask_argument, "takes_softcap": "softcap" in params,
        "takes_bias": "bias" in params, "grouped_heads": grouped_heads,
        "option_names": options,
        "backend": f"py:{function.__module__}:{function.__name__}" if at_module_level else None,
        "__module__": function.__module__, "__qualname__": function.__qualname__, "__doc__": function.__doc__,
        "__wrapped__": function,
    }
    cls = _KernelClass(function.__name__, (KernelAdapter,), attrs)
    _REGISTERED.append(cls)
    return cls


def _check_backward_arguments(function, backward, options):
    """The backward is called with the forward's keyword arguments: it must take each of them."""
    params = inspect.signature(backward).parameters
    if any(prm.kind is inspect.Parameter.VAR_KEYWORD for prm in params.values()):
        return
    forward_params = inspect.signature(function).parameters
    wanted = [n for n in PROBLEM_ARGUMENTS if n in forward_params] + list(options)
    missing = [n for n in wanted if n not in params]
    if missing:
        raise TypeError(f"@kernel: the backward of {function.__name__} must take the keyword arguments its forward "
                        f"takes: {', '.join(missing)} missing")


def is_kernel(obj) -> bool:
    """Whether obj is a class made by @kernel."""
    return isinstance(obj, type) and issubclass(obj, KernelAdapter) and obj is not KernelAdapter
