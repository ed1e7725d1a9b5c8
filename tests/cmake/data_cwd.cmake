# --data PATH on the command line is relative to the current directory, as every
# command-line path is (a path written in the .model stays relative to the model's folder).
# Run from tests/divergence: blobs.csv exists there and not beside classes3.model, and
# labels_out_of_range.csv exists beside classes3.model and not here. Inputs: MODELRUN.
execute_process(COMMAND ${MODELRUN} train ../golden/modelrun/classes3.model --data blobs.csv --steps 1 --threads 1 -q
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--data blobs.csv from tests/divergence: rc ${rc}\n${out}\n${err}")
endif()
execute_process(COMMAND ${MODELRUN} train ../golden/modelrun/classes3.model --data labels_out_of_range.csv --steps 1 -q
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "tests/divergence/labels_out_of_range.csv: no such file")
  message(FATAL_ERROR "--data labels_out_of_range.csv from tests/divergence: rc ${rc} (want 1, no such file here)\n${err}")
endif()
message(STATUS "--data resolves against the current directory: ${err}")
