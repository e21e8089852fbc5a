# qp-bench-context: a decode step's cost at positions of a long context,
# with either KV cache (a benchmark, not a test)
add_executable(qp-bench-context ${CMAKE_CURRENT_LIST_DIR}/bench_context.c)
target_link_libraries(qp-bench-context PRIVATE qpengine)
