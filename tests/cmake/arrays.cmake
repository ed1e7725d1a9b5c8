# Models that read every input by name from arrays (npy(), npz(), safetensors();
# runtime/session/data/array_source.cc), end to end through modelrun:
#  - a masked regression (features, a bool mask and a float target: three inputs) trains from
#    .npy files (float64, Fortran order, format 2.0) and reaches the error only the mask allows;
#  - the same data as a zip64 deflated .npz (its target under another name) and as safetensors
#    trains to the very same held-out figures;
#  - predict on the data's held-out split and on new data with --input (an archive, or one
#    .npy per input without the target), and every refusal on the way.
# Inputs: MODELRUN, GEN (tests/arrays_gen/masked_data), OUT (a scratch directory).
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})

include(${CMAKE_CURRENT_LIST_DIR}/modelrun_helpers.cmake)

string(RANDOM LENGTH 6 ALPHABET 0123456789 seed)
message(STATUS "data seed ${seed}")
execute_process(COMMAND ${GEN} ${OUT} 2000 ${seed} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "masked_data failed: ${rc}")
endif()

# The model beside its data (data paths are relative to the .model file), once per source.
file(READ tests/arrays/masked.model model)
set(npy_source "npy(x = \"x.npy\", mask = \"mask.npy\", y = \"y.npy\")")
string(REPLACE "${npy_source}" "npz(\"data.npz\", y = \"target\")" npz_model "${model}")
string(REPLACE "${npy_source}" "safetensors(\"data.safetensors\")" st_model "${model}")
file(WRITE ${OUT}/npy.model "${model}")
file(WRITE ${OUT}/npz.model "${npz_model}")
file(WRITE ${OUT}/st.model "${st_model}")

set(heldout "")
foreach(kind npy npz st)
  run(train ${OUT}/${kind}.model --threads 1 --checkpoint-dir ${OUT}/${kind} OUT o ERR e)
  expect("${o}${e}" "held-out: (loss [0-9.]+  mae ([0-9.]+) on 400 examples)" "${kind} training")
  if(CMAKE_MATCH_2 GREATER 0.05)
    message(FATAL_ERROR "${kind}: held-out MAE ${CMAKE_MATCH_2}; a model that applies the mask reaches ~0, one that "
                        "ignores it ~1.1")
  endif()
  expect("${o}${e}" "held-out: (loss [0-9.]+  mae [0-9.]+)" "${kind}")
  if(heldout STREQUAL "")
    set(heldout "${CMAKE_MATCH_1}")
  elseif(NOT heldout STREQUAL CMAKE_MATCH_1)
    message(FATAL_ERROR "${kind} gives '${CMAKE_MATCH_1}', npy gave '${heldout}': the same arrays must train the same")
  endif()
endforeach()

# Loader threads change nothing: the batches, and so the run, are the same for any --workers.
run(train ${OUT}/npy.model --threads 1 --workers 3 --prefetch 1 --checkpoint-dir ${OUT}/w3 OUT o ERR e)
expect("${o}${e}" "held-out: (loss [0-9.]+  mae [0-9.]+)" "--workers 3")
if(NOT heldout STREQUAL CMAKE_MATCH_1)
  message(FATAL_ERROR "--workers 3 gives '${CMAKE_MATCH_1}', one worker gave '${heldout}'")
endif()
file(SHA256 ${OUT}/npy/checkpoint.safetensors one_worker)
file(SHA256 ${OUT}/w3/checkpoint.safetensors three_workers)
if(NOT one_worker STREQUAL three_workers)
  message(FATAL_ERROR "the checkpoints of 1 and 3 loader workers differ")
endif()

# predict: the held-out split (with its targets), then new data.
set(ck ${OUT}/npy/checkpoint.safetensors)
run(predict ${OUT}/npy.model --checkpoint ${ck} --output pred -o ${OUT}/p.csv ERR e)
expect("${e}" "masked: 400 examples \\(held-out split\\) predicted into .*p.csv; pred: mean absolute error 0.0[0-4]"
       "predict on the held-out split")
file(STRINGS ${OUT}/p.csv rows)
list(GET rows 0 header)
expect("${header}" "^split,example,label,pred$" "the CSV header")
run(predict ${OUT}/npy.model --checkpoint ${ck} --output pred --input ${OUT}/data.safetensors -o ${OUT}/all.csv ERR e)
expect("${e}" "masked: 2000 examples \\(.*data.safetensors\\) predicted .*mean absolute error 0.0[0-4]" "predict --input FILE")
file(STRINGS ${OUT}/all.csv rows)
list(LENGTH rows n)
if(NOT n EQUAL 2001)
  message(FATAL_ERROR "predict --input wrote ${n} lines, expected a header and 2000 rows")
endif()
list(GET rows 1 first)
expect("${first}" "^input,0,[-0-9.e]+,[-0-9.e]+$" "the first row is example 0 of the file")
run(predict ${OUT}/npy.model --checkpoint ${ck} --output pred --input x=${OUT}/x.npy --input mask=${OUT}/mask.npy
    OUT o ERR e)
expect("${o}" "^split,example,pred\ninput,0," "predict without targets")
expect("${e}" "masked: 2000 examples \\(x=.* mask=.*\\) predicted\n$" "no error figure without targets")

# Refusals.
run(predict ${OUT}/npy.model --checkpoint ${ck} --output pred --input x=${OUT}/x.npy RC 2 ERR e)
expect("${e}" "--input: the prediction reads input 'mask'; give --input mask=FILE.npy" "a missing input")
run(predict ${OUT}/npy.model --checkpoint ${ck} --output pred --input ${OUT}/x.npy RC 2 ERR e)
expect("${e}" "give a .npz or .safetensors file of arrays, or INPUT=FILE.npy per input" "one .npy for several inputs")
run(predict ${OUT}/npy.model --checkpoint ${ck} --output pred --input z=${OUT}/x.npy RC 2 ERR e)
expect("${e}" "model 'masked' has no input 'z' \\(its inputs: x, mask, y\\)" "an unknown input")
run(predict ${OUT}/npy.model --checkpoint ${ck} --output pred --input ${OUT}/data.npz --split all RC 2 ERR e)
expect("${e}" "--split does not apply with --input" "--split with --input")
run(predict models/char_gpt.model --checkpoint ${ck} --output logits --input ${OUT}/data.npz RC 2 ERR e)
expect("${e}" "--input: model 'char_gpt' reads text\\(\\) data, which --input does not take" "--input for a text model")
run(predict models/diabetes.model --checkpoint ${ck} --output pred --input x=${OUT}/x.npy RC 2 ERR e)
expect("${e}" "--input: model 'diabetes' reads csv\\(\\) data; give one .csv file" "arrays for a csv model")
run(train ${OUT}/npy.model --data mask=${OUT}/x.npy --steps 1 RC 1 ERR e)
expect("${e}" "x.npy: a float64 array cannot feed input 'mask' \\(bool\\)" "a float array for a bool input")
run(train ${OUT}/npy.model --data ${OUT}/x.npy --steps 1 RC 2 ERR e)
expect("${e}" "npy\\(\\) binds a file per input; give --data INPUT=FILE.npy" "--data PATH for npy()")
run(train ${OUT}/npz.model --data y=nosuch --steps 1 RC 1 ERR e)
expect("${e}" "data.npz: no array 'nosuch' for input 'y' \\(the file holds 'x', 'mask', 'target'\\)" "a missing array")
file(WRITE ${OUT}/short.npy "\x93NUMPY")
run(train ${OUT}/npy.model --data y=${OUT}/short.npy --steps 1 RC 1 ERR e)
expect("${e}" "short.npy: not a .npy file" "a damaged .npy")
