# The hand kernels' PTX, embedded in modelc_kernels (included from runtime/CMakeLists.txt
# after modelc_runtime is defined). With the CUDA toolkit, nvcc compiles
# kernels/cuda/hand_kernels.cu to PTX for compute_80 (C++17: fmt and C++20 stay out of .cu
# files; -fmad=false: no FMA contraction, so the kernels round as the CPU twins do) and
# embed_ptx.cmake writes it into a .cc as hand_kernels_ptx(); without nvcc that function
# returns "" and no CUDA op of kernels/cuda/ is registered.
set(MODELC_HAND_KERNELS_DIR ${CMAKE_CURRENT_LIST_DIR})
set(hk_cc ${CMAKE_CURRENT_BINARY_DIR}/hand_kernels_ptx.cc)
if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE)
  set(hk_ptx ${CMAKE_CURRENT_BINARY_DIR}/hand_kernels.ptx)
  set(hk_werror)
  if(MODELC_WERROR)
    set(hk_werror --Werror all-warnings)
  endif()
  add_custom_command(
    OUTPUT ${hk_ptx}
    COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} -ptx -arch=compute_80 -std=c++17 -O3 -fmad=false --expt-relaxed-constexpr ${hk_werror}
            -I${PROJECT_SOURCE_DIR} ${MODELC_HAND_KERNELS_DIR}/hand_kernels.cu -o ${hk_ptx}
    DEPENDS ${MODELC_HAND_KERNELS_DIR}/hand_kernels.cu ${MODELC_HAND_KERNELS_DIR}/hand_kernels.def
            ${MODELC_HAND_KERNELS_DIR}/bodies.h ${MODELC_HAND_KERNELS_DIR}/bodies_sdpa.h
            ${PROJECT_SOURCE_DIR}/runtime/base/philox.h ${PROJECT_SOURCE_DIR}/runtime/base/kernel_limits.h
    COMMENT "nvcc: PTX of the hand kernels (kernels/cuda/hand_kernels.cu)"
    VERBATIM)
  add_custom_command(
    OUTPUT ${hk_cc}
    COMMAND ${CMAKE_COMMAND} -DPTX=${hk_ptx} -DOUT=${hk_cc} -P ${MODELC_HAND_KERNELS_DIR}/embed_ptx.cmake
    DEPENDS ${hk_ptx} ${MODELC_HAND_KERNELS_DIR}/embed_ptx.cmake
    COMMENT "Embedding the hand kernels' PTX"
    VERBATIM)
else()
  add_custom_command(
    OUTPUT ${hk_cc}
    COMMAND ${CMAKE_COMMAND} -DPTX= -DOUT=${hk_cc} -P ${MODELC_HAND_KERNELS_DIR}/embed_ptx.cmake
    DEPENDS ${MODELC_HAND_KERNELS_DIR}/embed_ptx.cmake
    COMMENT "No nvcc: the runtime has no hand kernels"
    VERBATIM)
endif()
target_sources(modelc_kernels PRIVATE ${hk_cc})
