# The `cudnn` backend (backends/cudnn_sdpa.cpp): cuDNN's SDPA through the cuDNN frontend's
# header-only C++ graph API. Included by the top-level CMakeLists when ATTNFUZZ_WITH_CUDA=ON;
# defines the static library attnfuzz_cudnn. Compiles and links without a GPU. Needs:
#  - the CUDA toolkit: cudart is linked statically, so the binary does not pin a libcudart;
#  - cuDNN 9 (cudnn.h, libcudnn.so), looked for in CUDNN_ROOT / CUDNN_PATH (CMake or
#    environment variables), the CUDA toolkit, then the Python wheel's site-packages/nvidia/cudnn;
#    linked as a shared library with an rpath to its directory (LD_LIBRARY_PATH overrides it);
#  - the frontend's headers, which ci/setup.sh unpacks into .deps/cudnn_frontend/include.
get_filename_component(_attnfuzz_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

find_package(CUDAToolkit REQUIRED)

# cuDNN: the headers and the library from the same installation.
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDNN_PATH} $ENV{CUDNN_PATH} "${CUDAToolkit_LIBRARY_ROOT}" /usr/local/cuda)
execute_process(COMMAND python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])"
                OUTPUT_VARIABLE _cudnn_wheel OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _cudnn_wheel_rc ERROR_QUIET)
if(_cudnn_wheel_rc EQUAL 0 AND _cudnn_wheel)
  list(APPEND _cudnn_hints "${_cudnn_wheel}")
endif()
find_path(ATTNFUZZ_CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include
          DOC "Directory holding cudnn.h")
# The wheel ships only the versioned libcudnn.so.9.
find_library(ATTNFUZZ_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib lib/x64 DOC "libcudnn.so (cuDNN 9)")
if(NOT ATTNFUZZ_CUDNN_INCLUDE_DIR OR NOT ATTNFUZZ_CUDNN_LIBRARY)
  message(FATAL_ERROR "cuDNN not found (cudnn.h: ${ATTNFUZZ_CUDNN_INCLUDE_DIR}, libcudnn: ${ATTNFUZZ_CUDNN_LIBRARY}): "
                      "set CUDNN_ROOT to the installation, or -DATTNFUZZ_CUDNN_INCLUDE_DIR=... -DATTNFUZZ_CUDNN_LIBRARY=...")
endif()
set(_cudnn_version_header "${ATTNFUZZ_CUDNN_INCLUDE_DIR}/cudnn_version.h")
if(EXISTS "${_cudnn_version_header}")
  file(STRINGS "${_cudnn_version_header}" _cudnn_major REGEX "^#define CUDNN_MAJOR [0-9]+")
  string(REGEX REPLACE "^#define CUDNN_MAJOR ([0-9]+)" "\\1" _cudnn_major "${_cudnn_major}")
endif()
if(NOT _cudnn_major OR _cudnn_major LESS 9)
  message(FATAL_ERROR "cuDNN 9 or newer needed; ${ATTNFUZZ_CUDNN_INCLUDE_DIR} holds version '${_cudnn_major}'")
endif()
get_filename_component(_cudnn_libdir "${ATTNFUZZ_CUDNN_LIBRARY}" DIRECTORY)
message(STATUS "cuDNN ${_cudnn_major}: ${ATTNFUZZ_CUDNN_LIBRARY}")

# The frontend (header-only).
set(ATTNFUZZ_CUDNN_FRONTEND_INCLUDE "${_attnfuzz_root}/.deps/cudnn_frontend/include" CACHE PATH
    "Directory holding cudnn_frontend.h (the cuDNN frontend's include/)")
if(NOT EXISTS "${ATTNFUZZ_CUDNN_FRONTEND_INCLUDE}/cudnn_frontend.h")
  message(FATAL_ERROR "cuDNN frontend headers not found in ${ATTNFUZZ_CUDNN_FRONTEND_INCLUDE}: run ci/setup.sh "
                      "(it unpacks them from the nvidia-cudnn-frontend wheel), or set -DATTNFUZZ_CUDNN_FRONTEND_INCLUDE=<dir>")
endif()

add_library(attnfuzz_cudnn STATIC "${_attnfuzz_root}/backends/cudnn_sdpa.cpp" "${_attnfuzz_root}/backends/cudnn_graph.cpp")
target_include_directories(attnfuzz_cudnn SYSTEM PRIVATE "${ATTNFUZZ_CUDNN_FRONTEND_INCLUDE}" "${ATTNFUZZ_CUDNN_INCLUDE_DIR}")
# A static library's private dependencies still reach the final link: cudart, libcudnn, the rpath.
# NVRTC is not linked: backends/cudnn_graph.cpp opens it on first use (see there why).
target_link_libraries(attnfuzz_cudnn PUBLIC attnfuzz_core
                      PRIVATE CUDA::cudart_static "${ATTNFUZZ_CUDNN_LIBRARY}" "-Wl,-rpath,${_cudnn_libdir}" ${CMAKE_DL_LIBS}
                              attnfuzz_warnings)
