"""python -m attnfuzz_py ARGS: the `attnfuzz` command (cli.py) where its entry point is not on PATH."""
import sys

from .cli import main

sys.exit(main())
