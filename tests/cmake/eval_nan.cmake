# `modelrun eval` with a checkpoint that is not finite: NaN goes through every layer (no relu
# turns it into 0), the loss is not finite, and eval says which parameters are to blame and
# exits 1 (PyTorch gives a NaN loss for the same weights). Checked for a whole tensor of NaN,
# for one NaN, and for infinities; the untouched checkpoint evaluates and exits 0. On the way,
# the one-step training run that writes the checkpoint prints its counts in the singular.
# Inputs: MODELRUN, POISON (tests/tools/poison_checkpoint), OUT (a scratch directory); run
# from the source root.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(model models/fashion_mlp.model)
execute_process(COMMAND ${MODELRUN} train ${model} --steps 1 --threads 1 --save-initial ${OUT}/init.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "modelrun train failed (${rc}):\n${out}\n${err}")
endif()
# Counts as a person writes them: "1 step", "1 thread", "4 tensors".
if(NOT out MATCHES "fashion_mlp: 1 step in [0-9]+s, [0-9]+ samples/s on 1 thread\n" OR
   NOT err MATCHES "parameters in 4 tensors;" OR NOT err MATCHES "training 1 step of 64 examples \\(937 per epoch\\) on cpu, 1 thread,")
  message(FATAL_ERROR "the run's counts read wrong:\nstdout: ${out}\nstderr: ${err}")
endif()
execute_process(COMMAND ${MODELRUN} eval ${model} --checkpoint ${OUT}/init.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "held-out loss [0-9]")
  message(FATAL_ERROR "eval of the finite checkpoint: rc ${rc}\n${out}\n${err}")
endif()
foreach(how nan one-nan inf)
  execute_process(COMMAND ${POISON} ${OUT}/init.safetensors ${OUT}/${how}.safetensors linear.0.w ${how} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "poison_checkpoint ${how} failed")
  endif()
  execute_process(COMMAND ${MODELRUN} eval ${model} --checkpoint ${OUT}/${how}.safetensors
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(how STREQUAL "one-nan")
    set(count "1 of 200704")
  else()
    set(count "200704 of 200704")
  endif()
  set(want "modelrun: error: the held-out loss is NaN on 10000 examples: ${OUT}/${how}.safetensors has parameters that are not finite: linear.0.w (${count} values)\n")
  if(NOT rc EQUAL 1 OR NOT err STREQUAL want OR NOT out STREQUAL "")
    message(FATAL_ERROR "eval of a checkpoint with ${how} weights: rc ${rc} (want 1)\nstdout: ${out}\nstderr: ${err}\nwanted stderr: ${want}")
  endif()
endforeach()
message(STATUS "eval refuses NaN and infinite checkpoints with their tensors named")
