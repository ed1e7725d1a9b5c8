# The helpers of the modelrun end-to-end scripts (include()d; MODELRUN is the binary):
#   run(ARGS... [RC code] [OUT var] [ERR var])  runs modelrun, fails unless it exits with code
#                                               (default 0), and returns stdout and stderr
#   expect(text pattern what)                   fails unless text matches; CMAKE_MATCH_1 and _2
#                                               are the caller's afterwards

function(run)
  cmake_parse_arguments(R "" "RC;OUT;ERR" "" ${ARGN})
  execute_process(COMMAND ${MODELRUN} ${R_UNPARSED_ARGUMENTS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT DEFINED R_RC)
    set(R_RC 0)
  endif()
  if(NOT rc EQUAL R_RC)
    message(FATAL_ERROR "modelrun ${R_UNPARSED_ARGUMENTS}: rc ${rc}, expected ${R_RC}\n${out}\n${err}")
  endif()
  if(R_OUT)
    set(${R_OUT} "${out}" PARENT_SCOPE)
  endif()
  if(R_ERR)
    set(${R_ERR} "${err}" PARENT_SCOPE)
  endif()
endfunction()

function(expect text pattern what)
  if(NOT text MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: expected /${pattern}/ in:\n${text}")
  endif()
  set(CMAKE_MATCH_1 "${CMAKE_MATCH_1}" PARENT_SCOPE)
  set(CMAKE_MATCH_2 "${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()
