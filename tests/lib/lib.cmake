# The tests' shared helpers: qptest (qp_test.h: main(), the scratch folder
# and models, files, running qpack and qp-gen-checkpoint), linked into every
# Check test by qp_add_check_test, and qptest_tok (tok_test_util.h: the
# tokenizer conformance cases), for the tests that read them.
add_library(qptest STATIC ${CMAKE_CURRENT_LIST_DIR}/qp_test.c)
target_include_directories(qptest PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(qptest PUBLIC PkgConfig::CHECK)
target_compile_definitions(qptest PUBLIC
    QP_GEN_CHECKPOINT="$<TARGET_FILE:qp-gen-checkpoint>" QP_QPACK="$<TARGET_FILE:qpack>")
add_dependencies(qptest qp-gen-checkpoint qpack)

add_library(qptest_tok STATIC ${CMAKE_CURRENT_LIST_DIR}/tok_test_util.c)
target_link_libraries(qptest_tok PUBLIC qptest qptok)
target_compile_definitions(qptest_tok PRIVATE QP_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
