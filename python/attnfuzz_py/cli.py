"""The `attnfuzz` command of the pip-installed package: finds the attnfuzz binary (api.find_binary)
and runs it with the same arguments, its Python workers pointed at this interpreter and package."""
import os
import sys

from . import api


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        binary = api.find_binary()
    except api.BinaryNotFound as e:
        print(f"attnfuzz: {e}", file=sys.stderr)
        return 2
    # exec, not a child: signals, the exit code and the terminal (live progress) stay the binary's own.
    os.execve(binary, [binary, *args], api.environment())


if __name__ == "__main__":
    sys.exit(main())
