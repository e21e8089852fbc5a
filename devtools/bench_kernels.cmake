# qp-bench-kernels: ns per multiply-add of each matrix kernel, one position
# against a block of positions (a benchmark, not a test)
add_executable(qp-bench-kernels ${CMAKE_CURRENT_LIST_DIR}/bench_kernels.c)
target_link_libraries(qp-bench-kernels PRIVATE qpengine)
