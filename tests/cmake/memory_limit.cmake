# --memory-limit (issue 15, item 9): the allocator's segments fit in what the limit leaves,
# so every limit at or above what the step needs trains (measured = predicted; the allocator
# once asked for a 20 MiB segment and failed under 3, 15 and 19 MiB), and one below it is an
# error that names --memory-limit, its value and what it refused, with exit status 1.
# Inputs: MODELRUN; run from the source root.
set(model models/fashion_mlp.model)
foreach(limit 1100KiB 3MiB 15MiB 19MiB)
  execute_process(COMMAND ${MODELRUN} train ${model} --steps 2 --threads 1 --quiet --memory-limit ${limit}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "memory: peak ([0-9.]+ MiB) measured, ([0-9.]+ MiB) predicted"
     OR NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2)
    message(FATAL_ERROR "--memory-limit ${limit}: rc ${rc}\n${out}\n${err}")
  endif()
  message(STATUS "--memory-limit ${limit}: trains, ${CMAKE_MATCH_1} measured and predicted")
endforeach()
execute_process(COMMAND ${MODELRUN} train ${model} --steps 2 --threads 1 --quiet --memory-limit 1MiB
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(want "the memory limit of 1.00 MiB (1048576 bytes: SessionOptions::memory_limit, modelrun --memory-limit) leaves 1.00 MiB after the 0 B already reserved, and the request needs 1.03 MiB (1080832 bytes)")
string(FIND "${err}" "${want}" at)
if(NOT rc EQUAL 1 OR at EQUAL -1 OR NOT err MATCHES "^modelrun: error: function 'train_step': out of memory allocating 1080832 bytes for the arena of its temporaries")
  message(FATAL_ERROR "--memory-limit 1MiB: rc ${rc} (want 1)\n${err}\nwanted: ${want}")
endif()
message(STATUS "--memory-limit 1MiB: refused, naming the limit")
