# .plan files end to end, through the binaries:
#  - `modelc FILE.model -o FILE.plan` writes a plan (silently, atomically, nothing else left);
#  - plan_runner, which links the runtime alone (checked with ldd: no LLVM, no ANTLR), loads
#    it and trains;
#  - `modelrun train FILE.plan` gives the same losses as `modelrun train FILE.model`;
#  - relative data paths of a plan resolve against the plan's directory;
#  - --emit=llvm, --emit=ptx --target, -fno-fusion, and a failed compile writes no plan.
# Inputs: MODELC, MODELRUN, RUNNER, OUT (a scratch directory); run from the source root.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

# modelc writes the plan silently and leaves nothing else.
run(${MODELC} models/fashion_mlp.model -o ${OUT}/fashion_mlp.plan)
if(NOT out STREQUAL "" OR NOT err STREQUAL "")
  message(FATAL_ERROR "modelc -o x.plan printed something:\n${out}\n${err}")
endif()
file(GLOB leftovers ${OUT}/*.tmp*)
if(leftovers)
  message(FATAL_ERROR "temporary files left behind: ${leftovers}")
endif()

# The runtime-only runner: its dynamic dependencies hold neither LLVM nor ANTLR.
execute_process(COMMAND ldd ${RUNNER} OUTPUT_VARIABLE deps RESULT_VARIABLE rc)
if(rc EQUAL 0 AND deps MATCHES "LLVM|antlr")
  message(FATAL_ERROR "${RUNNER} links the compiler's libraries:\n${deps}")
endif()
run(${RUNNER} ${OUT}/fashion_mlp.plan 8)
message(STATUS "${out}")

# modelrun on the plan and on the model: the same losses on the same real data.
function(losses file outvar)
  file(STRINGS ${file} lines)
  set(result)
  foreach(line IN LISTS lines)
    string(JSON kind GET "${line}" kind)
    if(kind STREQUAL "train")
      string(JSON loss GET "${line}" loss)
      list(APPEND result "${loss}")
    endif()
  endforeach()
  set(${outvar} "${result}" PARENT_SCOPE)
endfunction()
run(${MODELRUN} train ${OUT}/fashion_mlp.plan --steps 3 --threads 2 -q --metrics ${OUT}/plan.jsonl)
run(${MODELRUN} train models/fashion_mlp.model --steps 3 --threads 2 -q --metrics ${OUT}/model.jsonl)
losses(${OUT}/plan.jsonl from_plan)
losses(${OUT}/model.jsonl from_model)
list(LENGTH from_plan n)
if(NOT n EQUAL 3 OR NOT "${from_plan}" STREQUAL "${from_model}")
  message(FATAL_ERROR "losses differ:\n  from the plan:  ${from_plan}\n  from the model: ${from_model}")
endif()
message(STATUS "modelrun losses equal for the plan and the model: ${from_plan}")

# Relative data paths resolve against the plan's directory (the data is not beside the model).
file(MAKE_DIRECTORY ${OUT}/src ${OUT}/run)
file(WRITE ${OUT}/src/tiny.model
  "model tiny(B) {\n  input x: f32[B, 4]\n  input y: i32[B]\n  param w: f32[4, 10] = normal(std = 0.1)\n"
  "  loss = cross_entropy(x @ w, y)\n  output loss\n}\n"
  "train tiny {\n  data = csv(\"tiny.csv\")\n  batch = 4\n  validation = 0.25\n  optimizer = sgd(lr = 0.1)\n}\n")
set(rows "")
foreach(i RANGE 39)
  math(EXPR label "${i} % 3")
  math(EXPR a "${i} % 7")
  math(EXPR b "${i} % 5")
  string(APPEND rows "${a},${b},${label},1,${label}\n")
endforeach()
file(WRITE ${OUT}/run/tiny.csv "${rows}")
run(${MODELC} ${OUT}/src/tiny.model -o ${OUT}/run/tiny.plan)
execute_process(COMMAND ${MODELRUN} train ${OUT}/run/tiny.plan --steps 2 -q RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err WORKING_DIRECTORY ${OUT}/src)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "modelrun train on a plan with a relative data path failed (${rc}):\n${out}\n${err}")
endif()
# ... and --data still overrides it.
execute_process(COMMAND ${MODELRUN} train ${OUT}/run/tiny.plan --steps 1 -q --data ${OUT}/run/missing.csv
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "missing.csv")
  message(FATAL_ERROR "--data did not override the plan's data (${rc}): ${err}")
endif()

# --emit=llvm prints the kernels' module; --emit=ptx the PTX for --target; a plan built
# with --target holds that PTX; -fno-fusion is accepted.
file(WRITE ${OUT}/relu.model "model m(B) {\n  input x: f32[B, 4]\n  loss = mean(relu(x))\n  output loss\n}\n")
run(${MODELC} --emit=llvm ${OUT}/relu.model)
if(NOT out MATCHES "define ")
  message(FATAL_ERROR "--emit=llvm printed no kernels:\n${out}")
endif()
run(${MODELC} --emit=ptx --target=sm_90 ${OUT}/relu.model)
if(NOT out MATCHES "\\.target sm_90")
  message(FATAL_ERROR "--emit=ptx --target=sm_90 printed:\n${out}")
endif()
run(${MODELC} --emit=ptx ${OUT}/relu.model -o ${OUT}/relu.ptx)
file(READ ${OUT}/relu.ptx ptx)
if(NOT ptx MATCHES "\\.target sm_80")
  message(FATAL_ERROR "--emit=ptx -o wrote:\n${ptx}")
endif()
run(${MODELC} --target=sm_90 -fno-fusion ${OUT}/relu.model -o ${OUT}/relu.plan)
file(STRINGS ${OUT}/relu.plan target_lines REGEX "\\.target sm_90")
if(NOT target_lines)
  message(FATAL_ERROR "the plan compiled with --target=sm_90 holds no sm_90 PTX")
endif()
run(${MODELC} --emit=plan ${OUT}/relu.model -o ${OUT}/relu2.plan)
run(${RUNNER} ${OUT}/run/tiny.plan 4)

# A model with errors: exit status 1, its diagnostics, and no plan.
file(WRITE ${OUT}/bad.model "model m(B) {\n  input x: f32[B]\n  output y\n}\n")
execute_process(COMMAND ${MODELC} ${OUT}/bad.model -o ${OUT}/bad.plan RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR EXISTS ${OUT}/bad.plan OR NOT err MATCHES "error")
  message(FATAL_ERROR "a failed compile must exit 1 and write no plan: rc=${rc} ${err}")
endif()
message(STATUS "plans end to end: ok")
