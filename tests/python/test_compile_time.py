"""Compile time is not run time (python/attnfuzz_py/compile_time.py): Triton's JIT compiles, seen
through its compile hooks, count as compiling blocks (compile seconds and compiles counted, a
"compiling" notice at once and every HEARTBEAT_S while one runs), a hook set before is still
called, a compile that raised is closed at the end of its call, and nothing is noticed after.
Triton's hooks are called here as Triton 3.x's JITFunction._do_compile calls them (keyword
arguments); on a GPU, test_triton_compile_gpu.py runs real compiles.
    python test_compile_time.py PACKAGE_DIR
"""
import sys
import time

sys.path.insert(0, sys.argv[1])

try:
    from triton import knobs
except ImportError as e:
    print(f"SKIP: {sys.executable} has no triton ({e}; run ci/setup.sh)")
    sys.exit(77)

from attnfuzz_py import compile_time  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


class Channel:
    def __init__(self):
        self.frames = []

    def progress(self, payload):
        self.frames.append(payload.decode())


def hook_kwargs():  # what Triton 3.6 passes (triton/runtime/jit.py, _call_hook)
    return dict(key="k", repr="_fwd[...]", fn=None, compile={"key": "k"}, is_manual_warmup=False, already_compiled=False)


compile_time.HEARTBEAT_S = 0.1
channel = Channel()
compile_time.attach(channel)

user_calls = []
knobs.runtime.jit_cache_hook = lambda **kw: user_calls.append("before") or None
knobs.runtime.jit_post_compile_hook = lambda **kw: user_calls.append("after")
compile_time.watch_triton_compile()
compile_time.watch_triton_compile()  # twice: hooks installed once

# A compile of 0.35 s.
s0, n0 = compile_time.totals()
skip = knobs.runtime.jit_cache_hook(**hook_kwargs())
check(not skip, "the cache hook lets Triton compile")
time.sleep(0.35)
knobs.runtime.jit_post_compile_hook(**hook_kwargs())
s1, n1 = compile_time.totals()
check(n1 - n0 == 1, f"one compile counted, got {n1 - n0}")
check(0.3 <= s1 - s0 < 2.0, f"its seconds counted: {s1 - s0:.3f}")
check(channel.frames[:1] == ["compiling started"], f"a compiling notice at once: {channel.frames[:1]}")
check(len(channel.frames) >= 3, f"heartbeats while it ran: {channel.frames}")
check(user_calls == ["before", "after"], f"the hooks set before still run: {user_calls}")

# Outside a compile: no notice.
n_frames = len(channel.frames)
time.sleep(0.3)
check(len(channel.frames) == n_frames, "no compiling notice outside a compile")

# A compile that raised (no post-compile hook): closed at the end of the call.
knobs.runtime.jit_cache_hook(**hook_kwargs())
time.sleep(0.15)
compile_time.end_call()
s2, n2 = compile_time.totals()
check(n2 - n1 == 1 and s2 - s1 >= 0.1, f"the unfinished compile counted: {n2 - n1}, {s2 - s1:.3f} s")
n_frames = len(channel.frames)
time.sleep(0.3)
check(len(channel.frames) == n_frames, "no compiling notice after end_call")
s3, _ = compile_time.totals()
check(s3 == s2, "end_call left no compile open")

# A hook set before that skips the compile (a kernel found elsewhere): not a compile.
knobs.runtime.jit_cache_hook = None
compile_time._triton_watched = False
knobs.runtime.jit_cache_hook = lambda **kw: True
compile_time.watch_triton_compile()
check(knobs.runtime.jit_cache_hook(**hook_kwargs()) is True, "a skipping hook's answer reaches Triton")
check(compile_time.totals()[1] == n2, "a skipped compile is not counted")

print("compile time:", "all checks passed" if not failures else f"{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
