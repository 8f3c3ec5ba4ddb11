#!/usr/bin/env bash
# Brings a fresh Debian 12 machine to a working attnfuzz build. Idempotent:
# a second run re-checks and does nothing it does not need to.
#
#   Debian packages: compilers, ccache, CMake, Ninja, RapidCheck, Eigen, CLI11, nlohmann-json, fmt,
#                    GoogleTest, Google Benchmark, clang with the libFuzzer runtime; Slurm and
#                    munge (tests/slurm_array_test.sh starts a private single-node cluster).
#   LibTorch:        the C++ part of the PyPI `torch` wheel (pinned to the GPU machine's 2.11.0),
#                    unpacked into .deps/torch. The wheel's libtorch_cpu.so needs libcudart and
#                    libcupti at load time even on the CPU: their PyPI wheels go to .deps/nvidia.
#   Python env:      .deps/pyenv, a venv for the py: backends (docs/python-backends.md): torch
#                    for Python from the same 2.11.0 wheel (kept in .deps/wheels, downloaded once
#                    for both), numpy, JAX for the CPU, and pytest and setuptools (the tests
#                    of the pip-installable package, docs/testing-python-kernels.md), all pinned.
#   cuDNN frontend:  the header-only C++ graph API from the PyPI `nvidia-cudnn-frontend` wheel
#                    (the `cudnn` backend, ATTNFUZZ_WITH_CUDA builds), its include/ unpacked into
#                    .deps/cudnn_frontend/include. cuDNN itself comes with the CUDA install.
#   CUTLASS/CuTe:    the header-only C++ templates from the PyPI `nvidia-cutlass` wheel (the
#                    project's fused kernels, kernels/flash/), its cutlass_library/source/include
#                    unpacked into .deps/cutlass/include.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
TORCH_VERSION=${ATTNFUZZ_TORCH_VERSION:-2.11.0}
CUDNN_FRONTEND_VERSION=${ATTNFUZZ_CUDNN_FRONTEND_VERSION:-1.32.0}
CUTLASS_VERSION=${ATTNFUZZ_CUTLASS_VERSION:-4.2.0}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

pkgs=(build-essential cmake ninja-build git unzip python3 python3-pip python3-venv
      librapidcheck-dev libeigen3-dev libcli11-dev nlohmann-json3-dev libfmt-dev
      libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev chromium time python3 ccache
      slurmctld slurmd slurm-client munge)
# ATTNFUZZ_SETUP_SKIP_PACKAGES: Debian packages to leave out, space-separated. ci/docker/Dockerfile
# leaves out chromium (Ubuntu ships it as a snap; it serves the report screenshot test alone) and
# Slurm and munge (tests/slurm_array_test.sh's; a campaign pod needs neither).
skip=" ${ATTNFUZZ_SETUP_SKIP_PACKAGES:-} "
missing=()
for p in "${pkgs[@]}"; do
  [[ "$skip" == *" $p "* ]] && continue
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

mkdir -p "$deps"
stamp="$deps/torch/.attnfuzz-torch-$TORCH_VERSION"
if [ ! -f "$stamp" ]; then
  echo "setup: fetching LibTorch $TORCH_VERSION from the PyPI torch wheel (about 530 MB)"
  dl="$deps/wheels"  # kept: the Python env below installs the same torch wheel
  mkdir -p "$dl"
  pip_cmd=(python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dl")
  "${pip_cmd[@]}" "torch==$TORCH_VERSION"
  "${pip_cmd[@]}" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cupti==13.0.*"
  rm -rf "$deps/torch" "$deps/nvidia"
  mkdir -p "$deps/unpack"
  unzip -q -o "$dl"/torch-*.whl 'torch/lib/*' 'torch/include/*' 'torch/share/*' -d "$deps/unpack"
  # The CUDA half of the wheel is not needed for a CPU build; dropping it saves ~500 MB.
  rm -f "$deps"/unpack/torch/lib/libtorch_cuda*.so "$deps"/unpack/torch/lib/libtorch_python.so
  mv "$deps/unpack/torch" "$deps/torch"
  for w in "$dl"/nvidia_*.whl; do unzip -q -o "$w" 'nvidia/*' -d "$deps"; done
  rm -rf "$deps/unpack"
  touch "$stamp"
fi

# The wheel is a Python extension, but its include/ holds the whole header-only C++ API;
# the headers do not depend on the Python version the wheel was built for.
stamp="$deps/cudnn_frontend/.attnfuzz-cudnn-frontend-$CUDNN_FRONTEND_VERSION"
if [ ! -f "$stamp" ]; then
  echo "setup: fetching the cuDNN frontend $CUDNN_FRONTEND_VERSION headers from the PyPI nvidia-cudnn-frontend wheel"
  fe_dl=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$fe_dl" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION"
  rm -rf "$deps/cudnn_frontend"
  mkdir -p "$deps/cudnn_frontend"
  unzip -q -o "$fe_dl"/nvidia_cudnn_frontend-*.whl 'include/*' -d "$deps/cudnn_frontend"
  rm -rf "$fe_dl"
  touch "$stamp"
fi
# The py: backends' Python (docs/python-backends.md). pip resolves torch's own dependencies (its
# CUDA libraries: import torch loads them even on a CPU) from PyPI; the torch wheel itself comes
# from .deps/wheels when the step above left it there.
JAX_VERSION=${ATTNFUZZ_JAX_VERSION:-0.10.2}
NUMPY_VERSION=${ATTNFUZZ_NUMPY_VERSION:-2.3.5}  # 2.4 breaks Triton 3.6's interpreter (the Triton adapter's CPU test)
stamp="$deps/pyenv/.attnfuzz-pyenv-$TORCH_VERSION-$JAX_VERSION-$NUMPY_VERSION"
if [ ! -f "$stamp" ]; then
  echo "setup: creating the Python env of the py: backends (torch $TORCH_VERSION, jax $JAX_VERSION CPU) in $deps/pyenv"
  rm -rf "$deps/pyenv"
  python3 -m venv "$deps/pyenv"
  mkdir -p "$deps/wheels"
  "$deps/pyenv/bin/python" -m pip install --quiet --no-cache-dir --find-links "$deps/wheels" \
    "torch==$TORCH_VERSION" "numpy==$NUMPY_VERSION" "jax==$JAX_VERSION" "jaxlib==$JAX_VERSION"
  touch "$stamp"
fi
# pytest (the pytest plugin's tests, tests/python/test_pytest_plugin.py) and setuptools (their
# offline `pip install` of this repository, tests/python/pip_install_test.sh), pinned; a stamp of
# their own, so an existing env gains them without being made again.
PYTEST_VERSION=${ATTNFUZZ_PYTEST_VERSION:-9.2.0}
SETUPTOOLS_VERSION=${ATTNFUZZ_SETUPTOOLS_VERSION:-80.9.0}
stamp="$deps/pyenv/.attnfuzz-pytest-$PYTEST_VERSION-setuptools-$SETUPTOOLS_VERSION"
if [ ! -f "$stamp" ]; then
  echo "setup: adding pytest $PYTEST_VERSION and setuptools $SETUPTOOLS_VERSION to $deps/pyenv"
  "$deps/pyenv/bin/python" -m pip install --quiet --no-cache-dir "pytest==$PYTEST_VERSION" "setuptools==$SETUPTOOLS_VERSION"
  touch "$stamp"
fi
# CUTLASS's headers ship inside the Python package (cutlass_library/source/include).
stamp="$deps/cutlass/.attnfuzz-cutlass-$CUTLASS_VERSION"
if [ ! -f "$stamp" ]; then
  echo "setup: fetching the CUTLASS $CUTLASS_VERSION headers from the PyPI nvidia-cutlass wheel"
  cu_dl=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$cu_dl" "nvidia-cutlass==$CUTLASS_VERSION"
  rm -rf "$deps/cutlass" "$cu_dl/unpack"
  unzip -q -o "$cu_dl"/nvidia_cutlass-*.whl 'cutlass_library/source/include/*' -d "$cu_dl/unpack"
  mkdir -p "$deps/cutlass"
  mv "$cu_dl/unpack/cutlass_library/source/include" "$deps/cutlass/include"
  rm -rf "$cu_dl"
  touch "$stamp"
fi
echo "setup: ready (LibTorch $TORCH_VERSION in $deps/torch, cuDNN frontend $CUDNN_FRONTEND_VERSION in $deps/cudnn_frontend, CUTLASS $CUTLASS_VERSION in $deps/cutlass, Python env in $deps/pyenv)"
