# qp-bench-batch: a decode step's cost against the sessions sharing it
# (a benchmark, not a test)
add_executable(qp-bench-batch ${CMAKE_CURRENT_LIST_DIR}/bench_batch.c)
target_link_libraries(qp-bench-batch PRIVATE qpack_api)
target_include_directories(qp-bench-batch PRIVATE ${CMAKE_SOURCE_DIR}/include)
