# CUTLASS/CuTe headers for the Hopper tensor-core kernels (header-only; the nvidia-cutlass wheel
# ships them under cutlass_library/source/include). Looked up in MSA_CUTLASS_DIR (the cache
# variable, else the environment variable), then .deps/cutlass-include (scripts/install_deps.sh --cuda puts a copy there), then the Python
# package of the interpreter on PATH.
set(MSA_CUTLASS_DIR "" CACHE PATH "Directory holding cute/ and cutlass/ (CUTLASS include dir)")
set(_msa_cutlass_hints ${MSA_CUTLASS_DIR} $ENV{MSA_CUTLASS_DIR}
    ${CMAKE_CURRENT_SOURCE_DIR}/.deps/cutlass-include)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
    OUTPUT_VARIABLE _msa_py_cutlass OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_msa_py_cutlass)
    list(APPEND _msa_cutlass_hints ${_msa_py_cutlass})
  endif()
endif()
find_path(MSA_CUTLASS_INCLUDE_DIR cute/arch/mma_sm90_gmma.hpp HINTS ${_msa_cutlass_hints} NO_DEFAULT_PATH)
if(NOT MSA_CUTLASS_INCLUDE_DIR)
  message(FATAL_ERROR "msa: the CUDA backend needs the CUTLASS/CuTe headers: run "
                      "'bash scripts/install_deps.sh --cuda' or set MSA_CUTLASS_DIR")
endif()
message(STATUS "msa: CUTLASS headers in ${MSA_CUTLASS_INCLUDE_DIR}")
