# include/qpack.h as a user sees it: tokens, logits, sessions, sampler, text.
qp_add_check_test(test_lib SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lib.c LIBS qpack_api LABELS qrun TIMEOUT 600)
add_dependencies(test_lib qrun)
target_compile_definitions(test_lib PRIVATE QP_QRUN="$<TARGET_FILE:qrun>")
