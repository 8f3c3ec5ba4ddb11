# LibTorch: the C++ part of the PyPI `torch` wheel, which ci/setup.sh unpacks into .deps/torch
# (pinned to the GPU machine's 2.11.0). Any installed torch package works the same way:
#   -DATTNFUZZ_TORCH_ROOT=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
# Only libtorch_cpu and libc10 are linked. LibTorch's CUDA half (libtorch_cuda.so) is loaded
# at run time where it exists (oracles/torch_cuda_loader.h), so one binary serves machines
# with and without CUDA. The wheel's libtorch_cpu.so needs libcudart and libcupti at load
# time, which ci/setup.sh puts in .deps/nvidia.
set(ATTNFUZZ_TORCH_ROOT "${CMAKE_CURRENT_SOURCE_DIR}/.deps/torch" CACHE PATH "Unpacked LibTorch (lib/, include/)")
set(ATTNFUZZ_NVIDIA_LIBS "${CMAKE_CURRENT_SOURCE_DIR}/.deps/nvidia/cu13/lib" CACHE PATH "libcudart/libcupti for the wheel")

if(NOT EXISTS "${ATTNFUZZ_TORCH_ROOT}/lib/libtorch_cpu.so")
  message(FATAL_ERROR "LibTorch not found in ${ATTNFUZZ_TORCH_ROOT}: run ci/setup.sh, or configure with -DATTNFUZZ_WITH_TORCH=OFF")
endif()
add_library(attnfuzz::torch INTERFACE IMPORTED)
target_include_directories(attnfuzz::torch SYSTEM INTERFACE
  "${ATTNFUZZ_TORCH_ROOT}/include" "${ATTNFUZZ_TORCH_ROOT}/include/torch/csrc/api/include")
target_link_libraries(attnfuzz::torch INTERFACE
  "${ATTNFUZZ_TORCH_ROOT}/lib/libtorch_cpu.so" "${ATTNFUZZ_TORCH_ROOT}/lib/libc10.so" ${CMAKE_DL_LIBS}
  "-Wl,-rpath,${ATTNFUZZ_TORCH_ROOT}/lib:${ATTNFUZZ_NVIDIA_LIBS}" "-Wl,-rpath-link,${ATTNFUZZ_NVIDIA_LIBS}")
