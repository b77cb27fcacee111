# CUDA: on when nvcc is found (DSV4_CUDA=AUTO), forced with ON/OFF. Kernels are compiled ahead
# of time for sm_90a (Hopper; wgmma/TMA need the "a" variant).
set(DSV4_CUDA_ENABLED OFF)
if(NOT DSV4_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    # NOTE: no CMAKE_CUDA_STANDARD: CMake 3.25 cannot spell nvcc 13's C++20 flag; CUDA targets
    # pass -std=c++20 themselves.
    find_package(CUDAToolkit REQUIRED)
    set(DSV4_CUDA_ENABLED ON)
    # NCCL (ranks on several GPUs, docs/parallel.md): the CUDA toolkit's copy or the system's.
    # Without it the CUDA backend still builds and refuses rank groups with an error.
    find_path(DSV4_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(DSV4_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(DSV4_NCCL_INCLUDE_DIR AND DSV4_NCCL_LIBRARY)
      set(DSV4_NCCL_FOUND ON)
    else()
      set(DSV4_NCCL_FOUND OFF)
    endif()
    message(STATUS "dsv4: NCCL ${DSV4_NCCL_FOUND} ${DSV4_NCCL_LIBRARY}")
  elseif(DSV4_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DSV4_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "dsv4: CUDA backend ${DSV4_CUDA_ENABLED}")
