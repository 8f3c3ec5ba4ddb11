# LibTorch, one of two ways:
#  - a CUDA build (gpu preset, the GPU machine): the TorchConfig.cmake of the installed
#    torch package, found through Torch_DIR or `python3 -c "import torch; ..."`;
#  - a CPU build (cpu preset, CI): the C++ part of the PyPI wheel that ci/setup.sh unpacks
#    into .deps/torch. Only libtorch_cpu and libc10 are linked; the wheel's libtorch_cpu
#    needs libcudart and libcupti at load time, which ci/setup.sh puts in .deps/nvidia.
set(ATTNFUZZ_TORCH_ROOT "${CMAKE_CURRENT_SOURCE_DIR}/.deps/torch" CACHE PATH "Unpacked LibTorch (CPU builds)")
set(ATTNFUZZ_NVIDIA_LIBS "${CMAKE_CURRENT_SOURCE_DIR}/.deps/nvidia/cu13/lib" CACHE PATH "libcudart/libcupti for the wheel")

if(ATTNFUZZ_WITH_CUDA)
  if(NOT Torch_DIR)
    execute_process(COMMAND python3 -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0)
      list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
    endif()
  endif()
  find_package(Torch REQUIRED)
  add_library(attnfuzz::torch INTERFACE IMPORTED)
  target_link_libraries(attnfuzz::torch INTERFACE ${TORCH_LIBRARIES})
  target_compile_definitions(attnfuzz::torch INTERFACE ATTNFUZZ_TORCH_CUDA=1)
else()
  if(NOT EXISTS "${ATTNFUZZ_TORCH_ROOT}/lib/libtorch_cpu.so")
    message(FATAL_ERROR "LibTorch not found in ${ATTNFUZZ_TORCH_ROOT}: run ci/setup.sh, or configure with -DATTNFUZZ_WITH_TORCH=OFF")
  endif()
  add_library(attnfuzz::torch INTERFACE IMPORTED)
  target_include_directories(attnfuzz::torch SYSTEM INTERFACE
    "${ATTNFUZZ_TORCH_ROOT}/include" "${ATTNFUZZ_TORCH_ROOT}/include/torch/csrc/api/include")
  target_link_libraries(attnfuzz::torch INTERFACE
    "${ATTNFUZZ_TORCH_ROOT}/lib/libtorch_cpu.so" "${ATTNFUZZ_TORCH_ROOT}/lib/libc10.so"
    "-Wl,-rpath,${ATTNFUZZ_TORCH_ROOT}/lib:${ATTNFUZZ_NVIDIA_LIBS}" "-Wl,-rpath-link,${ATTNFUZZ_NVIDIA_LIBS}")
endif()
