# include/qpack.h as a user sees it: tokens, logits, sessions, sampler, text.
qp_add_check_test(test_lib SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lib.c LIBS qpack_api LABELS qrun TIMEOUT 600)
add_dependencies(test_lib qrun)
target_compile_definitions(test_lib PRIVATE QP_QRUN="$<TARGET_FILE:qrun>")

# qpack_session_save / restore: a restored session's bits, and refusals.
qp_add_check_test(test_session_file SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_session_file.c
                  LIBS qpack_api PkgConfig::XXHASH LABELS qrun TIMEOUT 600)
target_compile_definitions(test_session_file PRIVATE QP_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
