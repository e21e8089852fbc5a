# scripts/build.sh says what it does, a line per stage, and shows the end of
# a failing stage's output (tests/project/test_build_script.sh, stub cmake).
add_test(NAME build_script COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_build_script.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(build_script PROPERTIES TIMEOUT 30 LABELS project)
