# LibTorch: the one the user points at (-DCMAKE_PREFIX_PATH=<libtorch> or -DTorch_DIR=...), else the
# pinned `torch` wheel in the project's virtual environment (scripts/python-env.sh).
#
# The torch root goes first in CMAKE_PREFIX_PATH: TorchConfig.cmake finds its libraries with
# find_library, and with Debian's libtorch-dev installed a root further back loses to /usr/lib's
# libc10.so, and the programs abort at load.
if(NOT Torch_DIR AND NOT DEFINED ENV{Torch_DIR})
  set(accel_user_torch "")
  foreach(prefix IN LISTS CMAKE_PREFIX_PATH)
    if(EXISTS "${prefix}/share/cmake/Torch/TorchConfig.cmake")
      set(accel_user_torch "${prefix}")
    endif()
  endforeach()
  if(NOT accel_user_torch)
    execute_process(COMMAND "${CMAKE_CURRENT_LIST_DIR}/../scripts/python-env.sh" --torch-dir
                    OUTPUT_VARIABLE accel_wheel_torch OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE accel_wheel_status ERROR_QUIET)
    if(accel_wheel_status EQUAL 0 AND EXISTS "${accel_wheel_torch}/share/cmake/Torch")
      message(STATUS "LibTorch: the torch wheel in ${accel_wheel_torch}")
      list(PREPEND CMAKE_PREFIX_PATH "${accel_wheel_torch}")
    endif()
  endif()
endif()

find_package(Torch REQUIRED)

# Version gates live in runtime/src/torch_compat.h; this is the floor they assume.
if(Torch_VERSION VERSION_LESS 2.6)
  message(FATAL_ERROR "accel needs LibTorch 2.6 or later (tested with 2.11); found ${Torch_VERSION} "
                      "in ${TORCH_INSTALL_PREFIX}. Point CMAKE_PREFIX_PATH at a newer libtorch, or "
                      "run scripts/install-deps.sh for the pinned wheel.")
endif()
# From 2.14 the LibTorch headers refuse anything older than C++20.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.14)
  set(ACCEL_CXX_STANDARD 20)
else()
  set(ACCEL_CXX_STANDARD 17)
endif()
set(ACCEL_WITH_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(ACCEL_WITH_CUDA ON)
endif()

# The torch wheel's libtorch.so exports its own copy of std::filesystem (statically linked from a
# newer libstdc++), and a program's calls that bind to it crash (remove_all jumps to address 0).
# Naming libstdc++ ahead of LibTorch on the link line makes the program's std:: calls bind to the
# system's. accel::accel carries this to users' programs.
set(ACCEL_TORCH_LINK_FIRST stdc++)

# NCCL: the headers of the NCCL LibTorch loads (the wheel's nvidia-nccl package), else the CUDA
# toolkit's. Its version is what `accel env` reports as built with.
set(ACCEL_NCCL_VERSION "")
if(ACCEL_WITH_CUDA)
  find_path(ACCEL_NCCL_INCLUDE_DIR nccl.h
            HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include" NO_CACHE)
  if(NOT ACCEL_NCCL_INCLUDE_DIR)
    find_path(ACCEL_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
  endif()
  if(ACCEL_NCCL_INCLUDE_DIR)
    file(STRINGS "${ACCEL_NCCL_INCLUDE_DIR}/nccl.h" nccl_defines
         REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) [0-9]+")
    set(nccl_parts "")
    foreach(line IN LISTS nccl_defines)
      string(REGEX REPLACE "^#define NCCL_[A-Z]+ ([0-9]+).*" "\\1" part "${line}")
      list(APPEND nccl_parts ${part})
    endforeach()
    string(REPLACE ";" "." ACCEL_NCCL_VERSION "${nccl_parts}")
  endif()
endif()
message(STATUS "LibTorch ${Torch_VERSION}, CUDA: ${ACCEL_WITH_CUDA}, NCCL headers: "
               "${ACCEL_NCCL_VERSION} (${ACCEL_NCCL_INCLUDE_DIR})")
