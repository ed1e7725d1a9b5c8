# Float targets from csv() and scalar outputs reported by name: tests/train/regression.model
# trains an MSE regression (its noise floor is an MSE of 0.01; predicting the mean scores
# about 17), and `modelrun train` and the metrics file report its second output, mae, beside
# the loss. Inputs: MODELRUN, OUT (a directory for the metrics file).
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${MODELRUN} train tests/train/regression.model --metrics ${OUT}/m.jsonl --threads 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "train: rc ${rc}\n${out}\n${err}")
endif()
if(NOT out MATCHES "held-out: loss ([0-9.]+)  mae ([0-9.]+) on 60 examples")
  message(FATAL_ERROR "no held-out line with the loss and mae:\n${out}")
endif()
set(loss "${CMAKE_MATCH_1}")
set(mae "${CMAKE_MATCH_2}")
if(loss GREATER 0.2 OR mae GREATER 0.4)
  message(FATAL_ERROR "the regression did not fit: held-out MSE ${loss}, MAE ${mae} (noise floor 0.01):\n${out}")
endif()
file(STRINGS ${OUT}/m.jsonl evals REGEX "\"kind\": \"eval\"")
list(GET evals 0 first)
if(NOT first MATCHES "\"loss\": ([0-9.]+),.*\"mae\": ([0-9.]+)")
  message(FATAL_ERROR "the metrics file's eval rows have no mae: ${first}")
endif()
if(NOT CMAKE_MATCH_1 GREATER 1)
  message(FATAL_ERROR "the first held-out loss (${CMAKE_MATCH_1}) is already low: the test shows no learning")
endif()
message(STATUS "regression: held-out MSE ${loss}, MAE ${mae}; first evaluation: ${first}")
