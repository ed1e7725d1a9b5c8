# What --resume refuses and what it says (issue 15, items 5 and 6): a run whose steps are all
# done trains nothing and says so; a checkpoint past the run's end, a cosine schedule resumed
# into another length, and metadata that is malformed or inconsistent are refused naming the
# file and the field; the summary counts only the steps this run ran.
# Inputs: MODELRUN, POISON (tests/tools/poison_checkpoint), MODEL (fashion_mlp), OUT.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
# A cosine-schedule copy of the model, small (H=32): its data paths are absolute.
file(READ ${MODEL} text)
string(REPLACE "seed = 1" "seed = 1\n  schedule = cosine(warmup = 1)" text "${text}")
file(WRITE ${OUT}/cosine.model "${text}")

# run(NAME RC MODEL ARGS...): stdout in NAME_out, stderr in NAME_err, the exit status checked.
function(run name want model)
  execute_process(COMMAND ${MODELRUN} train ${model} -D H=32 --threads 2 ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "${name}: modelrun ${ARGN} exited ${rc}, not ${want}:\n${out}\n${err}")
  endif()
  set(${name}_out "${out}" PARENT_SCOPE)
  set(${name}_err "${err}" PARENT_SCOPE)
endfunction()
function(expect name stream pattern)
  if(NOT "${${name}_${stream}}" MATCHES "${pattern}")
    message(FATAL_ERROR "${name}: ${stream} lacks '${pattern}':\n${${name}_${stream}}")
  endif()
endfunction()

set(ck ${OUT}/ck/checkpoint.safetensors)
run(first 0 ${OUT}/cosine.model --steps 4 --checkpoint-dir ${OUT}/ck)
expect(first out "fashion_mlp: 4 steps in ")

# All steps done: nothing to train, said so, and the summary counts none.
run(done 0 ${OUT}/cosine.model --steps 4 --resume ${ck})
expect(done err "at step 4: the run's 4 steps are all done; nothing to train")
expect(done out "fashion_mlp: 0 steps \\(of 4, from step 4\\) in ")
# Past the run's end.
run(past 1 ${OUT}/cosine.model --steps 2 --resume ${ck})
expect(past err "checkpoint.safetensors: at step 4, past this run's 2 steps: nothing to train")
# A cosine schedule resumed into another length.
run(horizon 1 ${OUT}/cosine.model --steps 8 --resume ${ck})
expect(horizon err "written by a run of 4 steps and this run has 8: the cosine schedule's learning rate depends")

# A constant schedule goes on to a longer run, says so, and counts only the steps it ran.
run(short 0 ${MODEL} --steps 3 --checkpoint-dir ${OUT}/ck2)
run(longer 0 ${MODEL} --steps 5 --resume ${OUT}/ck2/checkpoint.safetensors)
expect(longer err "was written by a run of 3 steps; this run goes on to 5")
expect(longer out "fashion_mlp: 2 steps \\(of 5, from step 3\\) in ")

# Metadata read strictly: each malformed or inconsistent field is refused naming the file and
# the field.
function(edited key value pattern)
  execute_process(COMMAND ${POISON} ${ck} ${OUT}/edited.safetensors --metadata ${key} ${value} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "poison_checkpoint --metadata ${key} failed")
  endif()
  run(edit 1 ${OUT}/cosine.model --steps 4 --resume ${OUT}/edited.safetensors)
  expect(edit err "edited.safetensors: ${pattern}")
endfunction()
edited(step 5.5 "metadata 'step' is \"5.5\", not a whole number")
edited(step 99999999999999999999 "metadata 'step' is \"99999999999999999999\", not a whole number")
edited(step -3 "metadata 'step' is \"-3\", not a whole number")
edited(seed 1x "metadata 'seed' is \"1x\", not a whole number")
edited(total_steps 4.0 "metadata 'total_steps' is \"4.0\", not a whole number")
# The step and the data position disagree (step 0 of a checkpoint 4 batches on: it would
# start over silently; data.epoch 1 at step 4 would skip an epoch).
edited(step 0 "metadata 'step' is 0 but 'data.epoch' 0 and 'data.batch' 4 are not where 0 steps leave")
edited(data.epoch 1 "metadata 'step' is 4 but 'data.epoch' 1 and 'data.batch' 4")
