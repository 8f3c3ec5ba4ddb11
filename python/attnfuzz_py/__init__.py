"""attnfuzz_py: Python kernels as attnfuzz backends (docs/python-backends.md).

    ./attnfuzz run CASE.json --backends reference,py:MODULE:CLASS[?key=value&...]

MODULE:CLASS names an Adapter subclass; attnfuzz runs it in a persistent worker process and
hands it tensors through shared memory.
"""
from .adapter import Adapter, Problem
from .compile_time import compiling, watch_torch_compile, watch_triton_compile
from .protocol import PROTOCOL_VERSION

__all__ = ["Adapter", "Problem", "PROTOCOL_VERSION", "compiling", "watch_torch_compile", "watch_triton_compile"]
