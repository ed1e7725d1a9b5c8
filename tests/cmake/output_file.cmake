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
if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot write '.*no/such/dir/x.ir'")
  message(FATAL_ERROR "an unwritable -o must exit 1 naming the file: rc=${rc} ${err}")
endif()
