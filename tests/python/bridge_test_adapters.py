"""Adapters with planted faults, for tests/python_bridge_test.sh: each must be caught."""
import os
import time

import torch

import attnfuzz_py
import attnfuzz_py.protocol
from attnfuzz_py.adapters.minimal import Minimal


class ScaledO(Minimal):
    """O off by 10%: a forward bug."""
    name = "scaled_o"

    def forward(self, p, q, k, v):
        o, lse = super().forward(p, q, k, v)
        return 1.1 * o, lse


class IgnoresDlse(Minimal):
    """Declares backward_takes_dlse but drops dLSE: the FlexAttention seed bug."""
    name = "ignores_dlse"

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        return super().backward(p, q, k, v, o, lse, d_o, torch.zeros_like(d_lse))


class Raises(Minimal):
    name = "raises"

    def forward(self, p, q, k, v):
        raise ValueError("planted error in forward")


class Crashes(Minimal):
    name = "crashes"

    def forward(self, p, q, k, v):
        os.abort()


class Hangs(Minimal):
    name = "hangs"

    def forward(self, p, q, k, v):
        time.sleep(3600)


class CompilesSlowly(Minimal):
    """A JIT compile of 5 s in its first forward (attnfuzz_py.compiling): longer than the test's
    watchdog (3 s), which must not count it."""
    name = "compiles_slowly"
    compiled = False

    def forward(self, p, q, k, v):
        if not self.compiled:
            with attnfuzz_py.compiling():
                time.sleep(5)
            self.compiled = True
        return super().forward(p, q, k, v)


class CompilesForever(Minimal):
    """A compiler that never ends: a timeout once ATTNFUZZ_COMPILE_LIMIT_S is spent."""
    name = "compiles_forever"

    def forward(self, p, q, k, v):
        with attnfuzz_py.compiling():
            time.sleep(3600)


class WrongShape(Minimal):
    """Returns O in the wrong shape: refused, never written past."""
    name = "wrong_shape"

    def forward(self, p, q, k, v):
        o, lse = super().forward(p, q, k, v)
        return o[:, :, :-1], lse


class Declines(Minimal):
    name = "declines"

    def supports(self, p):
        return "planted: declines every problem"


# A package of another protocol version: attnfuzz must refuse it at start-up.
class OtherProtocol(Minimal):
    name = "other_protocol"

    def __init__(self, **options):
        super().__init__(**options)
        attnfuzz_py.protocol.PROTOCOL_VERSION = 999


# A device attnfuzz does not know: refused at start-up (it was a backend_error on every call).
class UnknownDevice(Minimal):
    name = "unknown_device"
    device = "tpu"


# A 20 MB exception message: the reply must stay under the frame limit and arrive at once
# (a reply attnfuzz drops as too large would look like a hang).
class RaisesHuge(Minimal):
    name = "raises_huge"

    def forward(self, p, q, k, v):
        raise ValueError("huge " + "x" * (20 << 20))


# Declares the score bias and drops it: every biased call is wrong, so the bias must be flagged.
class IgnoresBias(Minimal):
    name = "ignores_bias"

    def _scores(self, p, q, k):
        p._bias = None  # planted: the call computed as if it had no bias
        return super()._scores(p, q, k)


# Minimal without its bias declaration: it would compute a bias right, so a refusal of biased
# calls is the envelope's (the bias clause's default), not its supports().
class NoBias(Minimal):
    name = "no_bias"
    envelope = None


# dBias 2% too large: a scaling bug in a bias-gradient kernel (tests/test_python_dbias.cpp).
class DbiasScaled(Minimal):
    name = "dbias_scaled"

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        grads = super().backward(p, q, k, v, o, lse, d_o, d_lse)
        return grads[:3] + (1.02 * grads[3],) if p.bias_requires_grad else grads


# dBias not summed over the dimensions the bias broadcasts: the gradient of the first batch
# element, head, query or key stands for the sum (a kernel that writes dBias per program without
# reducing the broadcast).
class DbiasNotSummed(Minimal):
    name = "dbias_not_summed"

    def backward(self, p, q, k, v, o, lse, d_o, d_lse):
        if not p.bias_requires_grad:
            return super().backward(p, q, k, v, o, lse, d_o, d_lse)
        bias_shape = p.bias_shape
        p._bias = p.bias.expand(p.batch, p.heads_q, p.seq_q, p.seq_kv)  # a dense bias: its dBias is dS itself
        p.bias_shape = tuple(p._bias.shape)
        dq, dk, dv, ds = super().backward(p, q, k, v, o, lse, d_o, d_lse)
        return dq, dk, dv, ds[tuple(slice(0, n) for n in bias_shape)]  # planted: index 0 instead of the sum
