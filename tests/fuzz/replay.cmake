# Replays the fuzzer's checks over tests/fuzz/corpus and tests/fuzz/regressions in every
# build (not only with MODELC_FUZZ), so that crashers found by fuzzing stay fixed.
add_executable(fuzz_replay ${CMAKE_CURRENT_LIST_DIR}/replay.cc)
target_link_libraries(fuzz_replay PRIVATE modelc_compiler)
modelc_warnings(fuzz_replay)
add_test(NAME fuzz.replay
         COMMAND fuzz_replay ${CMAKE_CURRENT_LIST_DIR}/corpus ${CMAKE_CURRENT_LIST_DIR}/regressions)
set_tests_properties(fuzz.replay PROPERTIES TIMEOUT 300)

# The runtime's file readers (tests/fuzz/runtime_checks.h): each target's corpus and
# regressions, one ctest each. Plan findings not yet fixed live in tests/fuzz/plan_findings,
# which is not replayed.
add_executable(fuzz_runtime_replay ${CMAKE_CURRENT_LIST_DIR}/replay_runtime.cc)
target_link_libraries(fuzz_runtime_replay PRIVATE modelc_runtime)
modelc_warnings(fuzz_runtime_replay)
foreach(target plan checkpoint data)
  add_test(NAME fuzz.replay_${target}
           COMMAND fuzz_runtime_replay ${target} ${CMAKE_CURRENT_LIST_DIR}/${target}_corpus
                   ${CMAKE_CURRENT_LIST_DIR}/${target}_regressions)
  set_tests_properties(fuzz.replay_${target} PROPERTIES TIMEOUT 120)
endforeach()
