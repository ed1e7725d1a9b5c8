# modelc -o: the output lands in the file (not on stdout), complete, and a failed compile
# leaves no file behind.
#   cmake -DMODELC=path -DMODEL=models/x.model -DGOLDEN=tests/golden/x.ir -DOUT=dir -P output_file.cmake
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND "${MODELC}" --emit=ir -o "${OUT}/x.ir" "${MODEL}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out STREQUAL "" OR NOT err STREQUAL "")
  message(FATAL_ERROR "modelc -o failed: rc=${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
file(READ "${OUT}/x.ir" got)
file(READ "${GOLDEN}" want)
if(NOT got STREQUAL want)
  message(FATAL_ERROR "${OUT}/x.ir differs from ${GOLDEN}")
endif()
file(GLOB leftovers "${OUT}/*.tmp")
if(leftovers)
  message(FATAL_ERROR "temporary files left behind: ${leftovers}")
endif()
# A model with an error: exit status 1 and no output file.
file(WRITE "${OUT}/bad.model" "model m(B) {\n  input x: f32[B]\n  output y\n}\n")
execute_process(COMMAND "${MODELC}" --emit=ir -o "${OUT}/bad.ir" "${OUT}/bad.model" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR EXISTS "${OUT}/bad.ir")
  message(FATAL_ERROR "a failed compile must exit 1 and write nothing: rc=${rc} ${err}")
endif()
# An output path that cannot be written: exit status 1 and a message naming it.
execute_process(COMMAND "${MODELC}" --emit=ir -o "${OUT}/no/such/dir/x.ir" "${MODEL}" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "no/such/dir/x.ir: cannot write: No such file or directory")
  message(FATAL_ERROR "an unwritable -o must exit 1 naming the file and why: rc=${rc} ${err}")
endif()
# Write errors say why, and leave nothing behind: a file-size limit stops the writes of
# --emit=llvm -o and --emit=grad -o part way (EFBIG, as a full disk stops them with ENOSPC).
foreach(emit llvm grad)
  execute_process(COMMAND prlimit --fsize=64 "${MODELC}" --emit=${emit} -o "${OUT}/big.${emit}" "${MODEL}"
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  file(GLOB left "${OUT}/big.${emit}*")
  if(NOT rc EQUAL 1 OR NOT err MATCHES "big.${emit}: cannot write: File too large" OR left)
    message(FATAL_ERROR "--emit=${emit} -o past a file-size limit must exit 1 saying why and leave no file: rc=${rc} ${err} ${left}")
  endif()
endforeach()
# stdout that cannot be written (a full device) is an error too.
execute_process(COMMAND "${MODELC}" --emit=ir "${MODEL}" OUTPUT_FILE /dev/full RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot write the output to stdout: No space left on device")
  message(FATAL_ERROR "a full stdout must exit 1 saying why: rc=${rc} ${err}")
endif()
