# layout: the folders keep the architecture (tests/project/test_layout.sh):
# each layer includes only what it may, the engine and the library print
# nothing, README.md stays a guide, the documents name what exists.
foreach(_case includes quiet readme docs)
  add_test(NAME layout_${_case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_layout.sh ${_case} ${CMAKE_SOURCE_DIR})
  set_tests_properties(layout_${_case} PROPERTIES TIMEOUT 30 LABELS project)
endforeach()
