# Replays the fuzzer's checks over tests/fuzz/corpus and tests/fuzz/regressions in every
# build (not only with MODELC_FUZZ), so that crashers found by fuzzing stay fixed.
add_executable(fuzz_replay ${CMAKE_CURRENT_LIST_DIR}/replay.cc)
target_link_libraries(fuzz_replay PRIVATE modelc_compiler)
modelc_warnings(fuzz_replay)
add_test(NAME fuzz.replay
         COMMAND fuzz_replay ${CMAKE_CURRENT_LIST_DIR}/corpus ${CMAKE_CURRENT_LIST_DIR}/regressions)
set_tests_properties(fuzz.replay PROPERTIES TIMEOUT 300)
