# The runtime's and the compiler's layers point one way (docs/architecture.md): every
# #include "..." of a file names a file of its own layer or of a layer below it. Run from
# the source root: cmake -P tests/layers/check_layers.cmake
# Prints every violation (file:line: what it includes) and fails when there is one.
#
# The runtime: base < device < kernels < execution < session; it never includes compiler/ or
# grammar/.
set(layers runtime/base runtime/device kernels runtime/execution runtime/session)
function(runtime_layer_of path out)
  set(rank -1)
  set(i 0)
  foreach(l ${layers})
    string(LENGTH "${l}/" n)
    string(SUBSTRING "${path}" 0 ${n} head)
    if(head STREQUAL "${l}/")
      set(rank ${i})
    endif()
    math(EXPR i "${i} + 1")
  endforeach()
  set(${out} ${rank} PARENT_SCOPE)
endfunction()

# The compiler: support < ir < frontend < passes (graph passes) < lowered (passes over the
# lowered Program) < codegen < the files directly in compiler/ (the compile API and the
# pipeline, which see everything). It may include the runtime's base and execution headers
# (the Program it builds, the memory plan it sizes) and the plan file's format
# (runtime/session/plan.h), never the rest of the session.
set(compiler_layers support ir frontend passes lowered codegen)
function(compiler_layer_of path out)
  string(REGEX MATCH "^compiler/([a-z_]+)/" m "${path}")
  if(NOT m)
    set(${out} 99 PARENT_SCOPE)  # directly in compiler/: the top
    return()
  endif()
  list(FIND compiler_layers "${CMAKE_MATCH_1}" rank)
  set(${out} ${rank} PARENT_SCOPE)
endfunction()

set(problems 0)
# Checks the includes of `files` against the layers `layer_fn` ranks: includes matching
# `forbidden` are refused with `why`; only includes matching `own` are ranked.
function(check_tree what layer_fn own forbidden why)
  set(checked 0)
  set(bad 0)
  foreach(f ${ARGN})
    cmake_language(CALL ${layer_fn} ${f} mine)
    if(mine LESS 0)
      message(SEND_ERROR "${f}: in no layer of the ${what}")
      math(EXPR bad "${bad} + 1")
      continue()
    endif()
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" inc "${line}")
      math(EXPR checked "${checked} + 1")
      if(inc MATCHES "${forbidden}" AND NOT inc STREQUAL "runtime/session/plan.h")
        message(SEND_ERROR "${f}: includes ${inc}: ${why}")
        math(EXPR bad "${bad} + 1")
      elseif(inc MATCHES "${own}")
        cmake_language(CALL ${layer_fn} ${inc} theirs)
        if(theirs GREATER mine)
          message(SEND_ERROR "${f}: includes ${inc}: a layer of the ${what} may not include one above it")
          math(EXPR bad "${bad} + 1")
        endif()
      endif()
    endforeach()
  endforeach()
  list(LENGTH ARGN n)
  message(STATUS "layers: ${checked} includes of ${n} ${what} files point down")
  math(EXPR total "${problems} + ${bad}")
  set(problems ${total} PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE rfiles RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}
     runtime/*.h runtime/*.cc kernels/*.h kernels/*.cc kernels/*.cu)
check_tree(runtime runtime_layer_of "^(runtime|kernels)/" "^(compiler|grammar)/"
           "the runtime never includes the compiler" ${rfiles})
file(GLOB_RECURSE cfiles RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} compiler/*.h compiler/*.cc compiler/*.def)
check_tree(compiler compiler_layer_of "^compiler/" "^runtime/session/"
           "the compiler builds Programs, it does not run them" ${cfiles})
if(problems GREATER 0)
  message(FATAL_ERROR "${problems} include(s) against the layers")
endif()
