# qp_add_check_test(<name> SOURCES ... LIBS ... [LABELS ...])
# A Check test binary run by ctest from the build tree with the repo's test
# data, linked with tests/lib's helpers (qptest).
function(qp_add_check_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} qptest)
  target_compile_definitions(${name} PRIVATE
      QP_SOURCE_DIR="${CMAKE_SOURCE_DIR}" QP_BINARY_DIR="${CMAKE_BINARY_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
                       ENVIRONMENT "CK_DEFAULT_TIMEOUT=${ARG_TIMEOUT}")
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()
