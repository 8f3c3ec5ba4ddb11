"""Compile time is not run time: while a JIT compiler works inside a call, the worker tells
attnfuzz so, and the watchdogs (ATTNFUZZ_PY_TIMEOUT_S, the campaign's --timeout) wait.

    with attnfuzz_py.compiling():     # around your own compile step
        kernel = build(...)

    attnfuzz_py.watch_torch_compile()   # once: torch.compile's compiles count by themselves

While at least one `compiling()` block is open, a thread of the worker sends a progress frame
"compiling ..." every HEARTBEAT_S seconds (harness/worker.h, kCompilingProgress). Each one gives
the call at least its whole timeout again from that moment, up to ATTNFUZZ_COMPILE_LIMIT_S (900 s)
of compile time per call: a call that hangs outside a compile still times out, and so does a
compiler that runs past the limit. Outside a worker (no channel attached) it only counts.

Compile seconds and compiles are counted here (`totals()`), so an adapter can report them
apart from run time.
"""
import contextlib
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
