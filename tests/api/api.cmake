# include/qpack.h as a user sees it: tokens, logits, sessions, sampler, text.
qp_add_check_test(test_lib SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lib.c ${CMAKE_SOURCE_DIR}/tests/formats/qpk_test_util.c
                  LIBS qpack_api LABELS qrun TIMEOUT 600)
add_dependencies(test_lib qp-gen-checkpoint qpack qrun)
target_compile_definitions(test_lib PRIVATE
    QP_GEN_CHECKPOINT="$<TARGET_FILE:qp-gen-checkpoint>"
    QP_QPACK="$<TARGET_FILE:qpack>" QP_QRUN="$<TARGET_FILE:qrun>")
target_include_directories(test_lib PRIVATE ${CMAKE_SOURCE_DIR}/tests/formats)
