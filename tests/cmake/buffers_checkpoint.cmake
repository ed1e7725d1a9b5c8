# Buffers through modelrun: tests/train/bn_regression.model (batch norm's running statistics)
# trains, its checkpoint holds the buffers beside the params, and `modelrun eval` of that
# checkpoint gives the held-out loss the training run ended with (eval mode: the running
# statistics, loaded from the file).
# Inputs: MODELRUN, OUT (a directory for the checkpoints).
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${MODELRUN} train tests/train/bn_regression.model --checkpoint-dir ${OUT} --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train: rc ${rc}\n${out}\n${err}")
endif()
string(REGEX MATCHALL "held-out: loss [0-9.]+" losses "${out}")
list(GET losses -1 last)
string(REGEX REPLACE "held-out: loss " "" last "${last}")
if(last GREATER 1.0)
  message(FATAL_ERROR "the batch-norm regression did not fit: held-out MSE ${last}:\n${out}")
endif()
file(READ ${OUT}/checkpoint.safetensors header OFFSET 8 LIMIT 4000)
foreach(name batchnorm1d.0.running_mean batchnorm1d.0.running_var batchnorm1d.0.g linear.0.w)
  string(FIND "${header}" "\"${name}\"" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the checkpoint has no tensor '${name}'")
  endif()
endforeach()
execute_process(COMMAND ${MODELRUN} eval tests/train/bn_regression.model --checkpoint ${OUT}/checkpoint.safetensors
                        --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE eval_out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "eval: rc ${rc}\n${eval_out}\n${err}")
endif()
if(NOT eval_out MATCHES "held-out loss ([0-9.]+)")
  message(FATAL_ERROR "no held-out loss from eval:\n${eval_out}")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL last)
  message(FATAL_ERROR "eval of the checkpoint gives held-out loss ${CMAKE_MATCH_1}, the run ended with ${last}")
endif()
message(STATUS "buffers: held-out MSE ${last} at the end of training and from the checkpoint")
