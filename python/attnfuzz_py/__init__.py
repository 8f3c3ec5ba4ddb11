"""attnfuzz_py: Python kernels as attnfuzz backends (docs/python-backends.md).

    ./attnfuzz run CASE.json --backends reference,py:MODULE:CLASS[?key=value&...]

MODULE:CLASS names an Adapter subclass, or a function decorated with @attnfuzz_py.kernel; attnfuzz
runs it in a persistent worker process and hands it tensors through shared memory. attnfuzz_py.api
runs the binary from Python; pytest --attnfuzz tests the decorated kernels of a test suite
(docs/testing-python-kernels.md).
"""
from .adapter import Adapter, Problem
from .compile_time import compiling, watch_torch_compile, watch_triton_compile
from .kernel import kernel, registered_kernels
from .protocol import PROTOCOL_VERSION

__all__ = ["Adapter", "Problem", "PROTOCOL_VERSION", "compiling", "kernel", "registered_kernels", "watch_torch_compile",
           "watch_triton_compile"]
