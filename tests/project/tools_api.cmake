# tools_api: qrun and qeval reach the engine through include/qpack.h only
add_test(NAME tools_api COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_tools_api.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(tools_api PROPERTIES TIMEOUT 30 LABELS qrun)
