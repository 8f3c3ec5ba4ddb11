"""Compile time is not run time: while a JIT compiler works inside a call, the worker tells
attnfuzz so, and the watchdogs (ATTNFUZZ_PY_TIMEOUT_S, the campaign's --timeout) wait.

    with attnfuzz_py.compiling():     # around your own compile step
        kernel = build(...)

    attnfuzz_py.watch_torch_compile()   # once: torch.compile's compiles count by themselves
    attnfuzz_py.watch_triton_compile()  # once: Triton's JIT compiles (@triton.jit kernels) too

While at least one `compiling()` block is open, a thread of the worker sends a progress frame
"compiling ..." every HEARTBEAT_S seconds (harness/worker.h, kCompilingProgress). Each one gives
the call at least its whole timeout again from that moment, up to ATTNFUZZ_COMPILE_LIMIT_S (900 s)
of compile time per call: a call that hangs outside a compile still times out, and so does a
compiler that runs past the limit. Outside a worker (no channel attached) it only counts.

Compile seconds and compiles are counted here (`totals()`), so an adapter can report them
apart from run time.
"""
import contextlib
import sys
import threading
import time

HEARTBEAT_S = 2.0

_lock = threading.Lock()
_wake = threading.Condition(_lock)
_depth = 0  # open compiling() blocks
_since = 0.0  # when the outermost one opened
_seconds = 0.0  # compile seconds so far (outermost blocks)
_count = 0  # outermost blocks so far
_channel = None
_thread = None


def attach(channel):
    """Called by the worker: compiling frames go to this channel (protocol.Channel.progress)."""
    global _channel, _thread
    _channel = channel
    if _thread is None:
        _thread = threading.Thread(target=_heartbeat, name="attnfuzz-compiling", daemon=True)
        _thread.start()


def _send(text):
    if _channel is not None:
        _channel.progress(f"compiling {text}".encode())


def enter():
    global _depth, _since, _count
    with _lock:
        _depth += 1
        if _depth > 1:
            return
        _since = time.perf_counter()
        _count += 1
        _wake.notify()
    _send("started")  # at once: the first heartbeat must not wait HEARTBEAT_S


def exit():  # noqa: A001 - the pair of enter()
    global _depth, _seconds
    with _lock:
        if _depth == 0:
            return
        _depth -= 1
        if _depth == 0:
            _seconds += time.perf_counter() - _since


@contextlib.contextmanager
def compiling():
    enter()
    try:
        yield
    finally:
        exit()


def totals():
    """(compile seconds, compiles) so far, the open compile included up to now."""
    with _lock:
        open_s = time.perf_counter() - _since if _depth else 0.0
        return _seconds + open_s, _count


def _heartbeat():
    while True:
        with _lock:
            while _depth == 0:
                _wake.wait()
            since = _since
        time.sleep(HEARTBEAT_S)
        with _lock:  # held while sending: no notice once the compile has ended
            if _depth > 0:
                _send(f"for {time.perf_counter() - since:.0f} s")


_torch_watched = False


def watch_torch_compile():
    """Counts torch.compile's compiles (dynamo's frames, and backward graphs compiled lazily at
    the first backward) as compiling() blocks, through dynamo's compile callbacks."""
    global _torch_watched
    if _torch_watched:
        return
    import torch._dynamo
    handler = torch._dynamo.callback_handler
    handler.register_start_callback(lambda args: enter())
    handler.register_end_callback(lambda args: exit())
    _torch_watched = True


_triton_watched = False


def watch_triton_compile():
    """Counts Triton's JIT compiles (a @triton.jit kernel launched with a new specialization) as
    compiling() blocks, through Triton's compile hooks: knobs.runtime.jit_cache_hook runs just
    before a compile, jit_post_compile_hook just after (Triton 3.x). Hooks set before are kept and
    still called. Triton's interpreter (TRITON_INTERPRET=1) compiles nothing: nothing is counted."""
    global _triton_watched
    if _triton_watched:
        return
    from triton import knobs
    before, after = knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook

    def cache_hook(*args, **kwargs):
        # A true return value tells Triton to skip the compile: only a hook set before may say so.
        skip = before(*args, **kwargs) if before else None
        if not skip:
            enter()
        return skip

    def post_compile_hook(*args, **kwargs):
        exit()
        return after(*args, **kwargs) if after else None

    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = cache_hook, post_compile_hook
    _triton_watched = True


def end_call():
    """Closes every compiling() block a call left open (a compile that raised before its end
    callback ran), so that no compiling notice outlives the call. The worker calls it after each
    request."""
    global _depth, _seconds
    with _lock:
        if _depth:
            _depth = 0
            _seconds += time.perf_counter() - _since


def split(fn, sync=None):
    """Runs fn() and returns (its result, {"compile_s", "compiles", "run_s"}): the compile time
    counted meanwhile, and the rest of the call's time (after sync(), where given: the GPU's
    queue drained)."""
    c0, n0 = totals()
    t0 = time.perf_counter()
    out = fn()
    if sync is not None:
        sync()
    dt = time.perf_counter() - t0
    c1, n1 = totals()
    return out, {"compile_s": c1 - c0, "compiles": n1 - n0, "run_s": max(0.0, dt - (c1 - c0))}


class CallTimes:
    """What an adapter with compiling kernels reports: each call run through split() (compile
    time apart from run time), the figures since the last reply (stats()) and over the whole run,
    and a stderr line for every call that compiled (a campaign kills its workers at its end,
    before the exit's stats line). Needs `name`; call CallTimes.__init__(self) in __init__."""

    def __init__(self):
        self._stats = {}  # since the last reply
        self._totals = {"compile_s": 0.0, "compiles": 0, "run_s": 0.0, "calls": 0}

    def _timed(self, fn):
        sync = None
        if getattr(self, "device", "cpu") == "cuda":  # CUDA launches return early: wait for them
            import torch
            if torch.cuda.is_available():  # (tests run CUDA adapters' glue on stand-ins, without one)
                sync = torch.cuda.synchronize
        out, parts = split(fn, sync)
        for k, x in parts.items():
            self._stats[k] = self._stats.get(k, 0) + x
            self._totals[k] += x
        self._totals["calls"] += 1
        if parts["compiles"]:
            t = self._totals
            print(f"py.{self.name}: compiled ({parts['compile_s']:.1f} s); so far compile_s={t['compile_s']:.1f} "
                  f"compiles={t['compiles']} run_s={t['run_s']:.1f} calls={t['calls']}", file=sys.stderr, flush=True)
        return out

    def stats(self):
        out, self._stats = self._stats, {}
        return out
