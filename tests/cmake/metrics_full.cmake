# Metrics on a full disk (issue 15, item 8): the file keeps whole rows only, the run stops with
# the reason, and a CSV whose header could not be written is not left behind empty.
# Inputs: MODELRUN, MODEL, OUT.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
# A file-size limit stops the writes part way, as a full disk does (EFBIG instead of ENOSPC).
execute_process(COMMAND prlimit --fsize=700 ${MODELRUN} train ${MODEL} -D H=32 --threads 2 -q --steps 40
                        --metrics ${OUT}/m.jsonl
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "m.jsonl: cannot write metrics: File too large \\(the file keeps the rows before it\\)")
  message(FATAL_ERROR "metrics past a file-size limit: rc=${rc} ${err}")
endif()
file(READ ${OUT}/m.jsonl text)
string(LENGTH "${text}" n)
if(n EQUAL 0 OR NOT text MATCHES "\n$")
  message(FATAL_ERROR "m.jsonl does not end with a whole row (${n} bytes):\n${text}")
endif()
file(STRINGS ${OUT}/m.jsonl lines)
list(LENGTH lines rows)
foreach(line IN LISTS lines)
  string(JSON step ERROR_VARIABLE bad GET "${line}" step)
  if(bad)
    message(FATAL_ERROR "m.jsonl has a row cut short: '${line}' (${bad})")
  endif()
endforeach()
message(STATUS "m.jsonl kept ${rows} whole rows (${n} bytes)")

# A device that is full from the first byte: the CSV header fails, the file is removed.
file(CREATE_LINK /dev/full ${OUT}/full.csv SYMBOLIC)
execute_process(COMMAND ${MODELRUN} train ${MODEL} -D H=32 --threads 2 -q --steps 2 --metrics ${OUT}/full.csv
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "full.csv: cannot write metrics: No space left on device")
  message(FATAL_ERROR "metrics to a full device: rc=${rc} ${err}")
endif()
if(EXISTS ${OUT}/full.csv)
  message(FATAL_ERROR "full.csv was left behind")
endif()
