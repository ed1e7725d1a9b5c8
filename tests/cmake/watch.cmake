# The plateau schedule and early stopping in a real run (tests/train/watch_regression.model):
# the run stops early and says why, the learning rate in the metrics file drops where a
# reduction is printed, best.safetensors evaluates to the best held-out loss the stop
# names, and a run resumed from a checkpoint before the stop stops at the same step with
# the same loss as the uninterrupted run. Inputs: MODELRUN, OUT (a directory).
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(model tests/train/watch_regression.model)
function(run expect_rc)
  execute_process(COMMAND ${MODELRUN} ${ARGN} --threads 1 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expect_rc)
    message(FATAL_ERROR "modelrun ${ARGN}: rc ${rc}, expected ${expect_rc}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()
function(match regex where var)
  string(REGEX MATCH "${regex}" m "${${where}}")
  if(m STREQUAL "")
    message(FATAL_ERROR "expected /${regex}/ in:\n${${where}}")
  endif()
  set(${var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

run(0 train ${model} --checkpoint-dir ${OUT}/a --metrics ${OUT}/a.jsonl)
set(full "${out}${err}")
match("early stopping at step ([0-9]+): the held-out loss has not improved on ([0-9.]+) \\(step [0-9]+\\) in 3 evaluations \\(patience 3\\)" full stop_step)
match("early stopping at step [0-9]+: the held-out loss has not improved on ([0-9.]+)" full best_loss)
match("watch_regression: ([0-9]+ steps of 3000, stopped early)" full ran)
match("held-out: (loss [0-9.]+)" full final_loss)
if(stop_step GREATER_EQUAL 3000 OR stop_step LESS 8)
  message(FATAL_ERROR "stopped at step ${stop_step}")
endif()

# Every reduction printed is in the metrics file: the train rows' lr halves after it.
match("the held-out mae has not improved on [0-9.]+ \\(step ([0-9]+)\\) in 2 evaluations: the learning rate goes from 0.05 to 0.025" full first_best)
file(STRINGS ${OUT}/a.jsonl rows REGEX "\"train\"")
set(seen_full FALSE)
set(seen_half FALSE)
foreach(r ${rows})
  string(JSON lr GET "${r}" lr)
  if(lr EQUAL 0.05)
    set(seen_full TRUE)
  elseif(lr EQUAL 0.025)
    set(seen_half TRUE)
  endif()
endforeach()
if(NOT seen_full OR NOT seen_half)
  message(FATAL_ERROR "the metrics file's lr does not go from 0.05 to 0.025")
endif()

# The best model is kept; it evaluates to the best loss the stop names.
run(0 eval ${model} --checkpoint ${OUT}/a/best.safetensors)
match("held-out loss ([0-9.]+)" out best_eval)
if(NOT best_eval STREQUAL best_loss)
  message(FATAL_ERROR "best.safetensors evaluates to ${best_eval}, the run's best was ${best_loss}")
endif()

# Stop halfway (a run of fewer steps), resume to the full length: the same stop, the same model.
math(EXPR half "(${stop_step} / 8) * 4")
run(0 train ${model} --steps ${half} --checkpoint-dir ${OUT}/b)
run(0 train ${model} --checkpoint-dir ${OUT}/b --resume)
set(resumed "${out}${err}")
match("early stopping at step ([0-9]+)" resumed resumed_stop)
match("held-out: (loss [0-9.]+)" resumed resumed_loss)
if(NOT resumed_stop EQUAL stop_step OR NOT resumed_loss STREQUAL final_loss)
  message(FATAL_ERROR "resumed from step ${half}: stopped at ${resumed_stop} with ${resumed_loss}; the run stopped at "
                      "${stop_step} with ${final_loss}")
endif()
# Resuming the stopped run trains no further.
run(0 train ${model} --checkpoint-dir ${OUT}/a --resume)
match("the run was stopped early: early stopping at step ([0-9]+)" err again)
message(STATUS "watch: ${ran}; best ${best_loss}; resumed from ${half} to the same stop")
