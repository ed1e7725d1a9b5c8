# Gradient accumulation and the memory contract (issue 15, item 1): `batch` is the effective
# batch of a step, split into K micro-batches of batch / K (docs/language.md). For K = 1, 2
# and 4, modelrun's header says both, the peak modelrun measures is the one modelc
# --emit=memory predicts for micro-batches of 256 / K,
# and a --mem-budget of exactly that peak is honoured, as is one a byte below it (met by
# recomputation, or refused at compile time by modelc and modelrun alike).
# Inputs: MODELRUN, MODELC; run from the source root.
set(model tests/memplan/accumulate.model)
foreach(k 1 2 4)
  execute_process(COMMAND ${MODELRUN} train ${model} -D K=${k} --threads 2 --quiet
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "memory: peak ([0-9.]+ [KMG]?i?B) measured, ([0-9.]+ [KMG]?i?B) predicted")
    message(FATAL_ERROR "K=${k}: modelrun train failed (${rc}):\n${out}\n${err}")
  endif()
  set(measured ${CMAKE_MATCH_1})
  set(predicted ${CMAKE_MATCH_2})
  if(NOT measured STREQUAL predicted)
    message(FATAL_ERROR "K=${k}: measured ${measured}, predicted ${predicted}")
  endif()
  execute_process(COMMAND ${MODELC} --emit=memory -D K=${k} ${model} RESULT_VARIABLE rc OUTPUT_VARIABLE mem ERROR_VARIABLE err)
  math(EXPR micro "256 / ${k}")
  if(NOT rc EQUAL 0 OR NOT mem MATCHES "'train_step' \\(B = ${micro}\\)\npredicted peak: ([0-9.]+ [KMG]?i?B) \\(([0-9]+) bytes\\)")
    message(FATAL_ERROR "K=${k}: modelc --emit=memory (${rc}) does not plan micro-batches of ${micro}:\n${mem}\n${err}")
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL predicted)
    message(FATAL_ERROR "K=${k}: modelc predicts ${CMAKE_MATCH_1}, modelrun ${predicted}")
  endif()
  set(bytes_${k} ${CMAKE_MATCH_2})
  # The header names the effective batch and the micro-batches.
  execute_process(COMMAND ${MODELRUN} train ${model} -D K=${k} --threads 1 --steps 1
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(k EQUAL 1)
    set(want "training 1 step of 256 examples \\(35 per epoch\\)")
  else()
    set(want "training 1 step of 256 examples \\(${k} micro-batches of ${micro}; 35 per epoch\\)")
  endif()
  if(NOT rc EQUAL 0 OR NOT err MATCHES "${want}")
    message(FATAL_ERROR "K=${k}: the header does not say '${want}':\n${err}")
  endif()
  execute_process(COMMAND ${MODELRUN} train ${model} -D K=${k} --mem-budget ${bytes_${k}} --quiet
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "memory: peak ${measured} measured, ${predicted} predicted")
    message(FATAL_ERROR "K=${k} under a budget of its own peak, ${bytes_${k}} bytes: rc ${rc}\n${out}\n${err}")
  endif()
  # A budget one byte below: recomputation lowers the peak under it, or modelc refuses it.
  math(EXPR less "${bytes_${k}} - 1")
  execute_process(COMMAND ${MODELC} --emit=memory -D K=${k} --mem-budget ${less} ${model}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE mem ERROR_VARIABLE err)
  execute_process(COMMAND ${MODELRUN} train ${model} -D K=${k} --mem-budget ${less} --quiet
                  RESULT_VARIABLE run_rc OUTPUT_VARIABLE out ERROR_VARIABLE run_err)
  if(rc EQUAL 0)
    if(NOT mem MATCHES "predicted peak: ([0-9.]+ [KMG]?i?B) \\(([0-9]+) bytes\\)" OR CMAKE_MATCH_2 GREATER less)
      message(FATAL_ERROR "K=${k}: modelc accepts a budget of ${less} bytes but predicts more:\n${mem}")
    endif()
    if(NOT run_rc EQUAL 0 OR NOT out MATCHES "memory: peak ${CMAKE_MATCH_1} measured, ${CMAKE_MATCH_1} predicted")
      message(FATAL_ERROR "K=${k} under a budget of ${less} bytes: rc ${run_rc}, modelc predicts ${CMAKE_MATCH_1}\n${out}\n${run_err}")
    endif()
  elseif(run_rc EQUAL 0 OR NOT err MATCHES "does not fit in the memory budget of" OR NOT run_err MATCHES "does not fit in the memory budget of")
    message(FATAL_ERROR "K=${k} under a budget of ${less} bytes: modelc rc ${rc}, modelrun rc ${run_rc}\n${err}\n${run_err}")
  endif()
  message(STATUS "accumulate ${k}: micro-batch ${micro}, peak ${measured} measured and predicted, budget held")
endforeach()

