# The divergence diagnosis (issue 15, "the divergence message diagnoses"): each cause of a
# non-finite loss gets its own words and what to do, never a blanket "try a lower --lr".
# Causes: exploding gradients (seen in the gradient-norm history), float16 overflow, a
# non-finite value from inside the model; and a resumed checkpoint that is not finite is
# refused before training. The numbers depend on the CPU's rounding, so the phrases are
# matched, not whole lines. Inputs: MODELRUN, POISON (tools/poison_checkpoint), WORK (a
# scratch folder); run from the source root.
function(expect_diagnosis what rc)
  execute_process(COMMAND ${MODELRUN} ${ARGN} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT got EQUAL ${rc})
    message(FATAL_ERROR "${what}: exit status ${got}, expected ${rc}\n${out}\n${err}")
  endif()
  foreach(pattern IN LISTS patterns)
    if(NOT err MATCHES "${pattern}")
      message(FATAL_ERROR "${what}: the error does not match '${pattern}':\n${err}")
    endif()
  endforeach()
  if(err MATCHES "try a lower --lr")
    message(FATAL_ERROR "${what}: the old blanket advice:\n${err}")
  endif()
  message(STATUS "${what}: ${err}")
endfunction()

set(patterns "the loss is NaN at step [0-9]+: training diverged: the gradient norm grew from [0-9.e+]+ \\(the median of steps 1 to [0-9]+\\) to [0-9.e+]+ at step [0-9]+: the gradients exploded; lower --lr \\(it is 0.05\\) or set clip_grad_norm = 1.0 in the train section"
             "parameters that are no longer finite: linear.0.w \\(32 of 32 values\\)")
expect_diagnosis("exploding gradients" 1 train tests/divergence/explode.model --lr 0.05 --threads 1 -q)

set(patterns "the loss is NaN at step 1: training diverged: the forward pass overflowed float16 \\(its largest value is 65504; the loss scaler skipped 1 of 1 steps and is at [0-9.e+]+\\); train with --precision bf16")
expect_diagnosis("float16 overflow" 1 train tests/divergence/explode.model --data tests/divergence/large.csv --precision fp16 --lr 0.001 --threads 1 -q)

set(patterns "the loss is -inf at step 1: training diverged: the first non-finite value arose inside the model at the first step of the run \\(an exp that overflows, a log or a division of 0, a sqrt of a negative value\\); the data is not the cause")
expect_diagnosis("inside the model" 1 train tests/divergence/log_of_zero.model --threads 1 -q)

# A checkpoint whose parameters are not finite is refused when it is resumed.
file(MAKE_DIRECTORY ${WORK})
set(ckpt ${WORK}/checkpoint.safetensors)
file(REMOVE ${ckpt})
execute_process(COMMAND ${MODELRUN} train tests/divergence/explode.model --lr 0.001 --steps 2 --threads 1 -q --checkpoint-dir ${WORK}
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "writing a checkpoint: rc ${rc}\n${err}")
endif()
execute_process(COMMAND ${POISON} ${ckpt} ${ckpt} linear.1.b nan RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "poisoning the checkpoint: rc ${rc}\n${err}")
endif()
set(patterns "checkpoint.safetensors: parameters that are not finite: linear.1.b \\(16 of 16 values\\); resume from an earlier checkpoint")
expect_diagnosis("a poisoned checkpoint resumed" 1 train tests/divergence/explode.model --lr 0.001 --steps 4 --threads 1 -q --resume ${ckpt})
