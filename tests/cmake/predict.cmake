# modelrun predict and generate end to end (tools/modelrun/infer.cc, generate.cc):
#  - fashion_mlp: predict's accuracy against the labels is eval's, CSV and JSONL rows for
#    every held-out example;
#  - regression: --output names a tensor of the body; the checkpoint's standardisation is
#    applied to other data (a subset with very different column means predicts as well);
#  - tiny_char: generate continues a prompt, the same text again with the same seed, another
#    with another; a character outside the vocabulary, a model that is not causal and bad
#    flags are refused.
# Inputs: MODELRUN, OUT (a scratch directory).
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})

include(${CMAKE_CURRENT_LIST_DIR}/modelrun_helpers.cmake)

# Fails unless the list `items` has `n` entries.
function(expect_count items n what)
  list(LENGTH items got)
  if(NOT got EQUAL n)
    message(FATAL_ERROR "${what}: ${got}, expected ${n}")
  endif()
endfunction()

# --- fashion_mlp -----------------------------------------------------------------------
run(train models/fashion_mlp.model --steps 40 --threads 2 -q --checkpoint-dir ${OUT}/fm)
set(ck ${OUT}/fm/checkpoint.safetensors)
run(eval models/fashion_mlp.model --checkpoint ${ck} --threads 2 OUT ev)
expect("${ev}" "accuracy ([0-9.]+)%" "eval")
set(acc ${CMAKE_MATCH_1})
run(predict models/fashion_mlp.model --checkpoint ${ck} --threads 2 -o ${OUT}/fm/p.csv ERR pe)
expect("${pe}" "fashion_mlp: 10000 examples \\(held-out split\\) predicted into .*p.csv; accuracy ${acc}% against their labels"
       "predict's accuracy is eval's")
file(STRINGS ${OUT}/fm/p.csv rows)
expect_count("${rows}" 10001 "lines of p.csv (a header and 10000 rows)")
list(GET rows 0 header)
expect("${header}" "^split,example,label,predicted,probability,logits.0,.*,logits.9$" "the CSV header")
list(GET rows 1 first)
expect("${first}" "^held-out,0,[0-9],[0-9],[.0-9e-]+(,-?[.0-9e-]+)+$" "a CSV row")
string(REPLACE "," ";" fields "${first}")
expect_count("${fields}" 15 "fields of a CSV row (split, example, label, predicted, probability, 10 logits)")
run(predict models/fashion_mlp.model --checkpoint ${ck} --threads 2 --split train -o ${OUT}/fm/p.jsonl -q)
file(STRINGS ${OUT}/fm/p.jsonl jrows)
expect_count("${jrows}" 60000 "rows of p.jsonl (the training examples)")
list(GET jrows 0 first)
expect("${first}" "^{\"split\":\"train\",\"example\":0,\"label\":[0-9],\"predicted\":[0-9],\"probability\":[.0-9e-]+,\"logits\":\\[[^]]+\\]}$"
       "a JSONL row")
run(predict models/fashion_mlp.model --checkpoint ${ck} -o ${OUT}/fm/p.txt RC 2 ERR e)
expect("${e}" "-o .*p.txt: predictions are written as .csv or .jsonl" "a bad -o")
if(EXISTS ${OUT}/fm/p.txt)
  message(FATAL_ERROR "a refused -o left a file")
endif()
run(predict models/fashion_mlp.model --checkpoint ${ck} --output nosuch RC 1 ERR e)
expect("${e}" "--output nosuch: model 'fashion_mlp' has no tensor named 'nosuch' \\(its tensors: " "an unknown --output")

# --- regression: a named tensor, and the recorded standardisation --------------------------
run(train tests/train/regression.model --threads 1 -q --checkpoint-dir ${OUT}/rg)
set(rk ${OUT}/rg/checkpoint.safetensors)
run(predict tests/train/regression.model --checkpoint ${rk} --output pred --split all -o ${OUT}/rg/all.csv ERR e)
expect("${e}" "regression: 300 examples \\(all split\\) predicted into .*all.csv; pred: mean absolute error ([0-9.]+) against"
       "regression predict")
if(CMAKE_MATCH_1 GREATER 0.5)
  message(FATAL_ERROR "the regression predicts badly: MAE ${CMAKE_MATCH_1}")
endif()
# Rows with x0 >= 1 only: their column means are far from the training data's, so
# standardising them with their own statistics would shift the predictions by several units.
file(STRINGS tests/train/data/regression.csv lines)
list(GET lines 0 text)
foreach(l IN LISTS lines)
  if(l MATCHES "^[1-9]")
    string(APPEND text "\n${l}")
  endif()
endforeach()
file(WRITE ${OUT}/rg/high.csv "${text}\n")
run(predict tests/train/regression.model --checkpoint ${rk} --output pred --split all --data ${OUT}/rg/high.csv ERR e)
expect("${e}" "pred: mean absolute error ([0-9.]+) against" "predict on other data")
if(CMAKE_MATCH_1 GREATER 0.6)
  message(FATAL_ERROR "other data predicts badly (MAE ${CMAKE_MATCH_1}): the checkpoint's standardisation was not applied")
endif()

# --- tiny_char: generate -------------------------------------------------------------------
set(corpus "")
foreach(i RANGE 60)
  string(APPEND corpus "the cat sat on the mat. ")
endforeach()
file(WRITE ${OUT}/tiny.txt "${corpus}")
run(train tests/train/tiny_char.model --data ${OUT}/tiny.txt --threads 1 -q --checkpoint-dir ${OUT}/tc)
set(tk ${OUT}/tc/checkpoint.safetensors)
set(gen generate tests/train/tiny_char.model --checkpoint ${tk} --threads 1 --prompt "the c" --tokens 40)
run(${gen} --seed 3 OUT a ERR ae)
run(${gen} --seed 3 OUT b)
run(${gen} --seed 4 --temperature 2 OUT c)
string(LENGTH "${a}" len)
expect("${a}" "^the c[a-z .]+\n$" "generated text")
if(NOT len EQUAL 46)
  message(FATAL_ERROR "expected the prompt, 40 characters and a newline, got ${len} characters: '${a}'")
endif()
if(NOT a STREQUAL b)
  message(FATAL_ERROR "the same seed generated different text:\n${a}\n${b}")
endif()
if(a STREQUAL c)
  message(FATAL_ERROR "another seed and temperature generated the same text: ${a}")
endif()
expect("${ae}" "tiny_char: 40 tokens in .* tokens/s; window 16, temperature 1, top-k 0, top-p 1, seed 3" "the summary")
run(${gen} --temperature 0 OUT g1)
run(${gen} --temperature 0 --seed 9 OUT g2)
if(NOT g1 STREQUAL g2)
  message(FATAL_ERROR "greedy decoding depends on the seed:\n${g1}\n${g2}")
endif()
# A prompt longer than the window slides it.
run(generate tests/train/tiny_char.model --checkpoint ${tk} --prompt "the cat sat on the mat. the" --tokens 5 OUT w)
expect("${w}" "^the cat sat on the mat. the[a-z .]+\n$" "a long prompt")
run(generate tests/train/tiny_char.model --checkpoint ${tk} --prompt "the dog" RC 1 ERR e)
expect("${e}" "--prompt: the character 'd' \\(byte 0x64\\) at offset 4 is not in the vocabulary of [0-9]+ characters" "a bad prompt")
run(generate tests/train/tiny_char.model -D CAUSAL=0 --checkpoint ${tk} --prompt "the c" RC 1 ERR e)
expect("${e}" "model 'tiny_char' is not causal" "a bidirectional model")
run(generate models/fashion_mlp.model --checkpoint ${ck} --prompt "x" RC 1 ERR e)
expect("${e}" "--output logits: model 'fashion_mlp'|generate needs an i32 input" "generate on a classifier")
foreach(bad "--top-p;0" "--top-p;1.5" "--tokens;-1" "--temperature;-1" "--top-k;-2" "--prompt;")
  run(generate tests/train/tiny_char.model --checkpoint ${tk} --prompt "the" ${bad} RC 2 ERR e)
  expect("${e}" "modelrun: error: --" "generate ${bad}")
endforeach()
message(STATUS "predict: accuracy ${acc}%; generated: ${a}")
