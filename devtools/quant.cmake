# qp-bench-quant: reconstruction error and speed of the INT4/INT8 quantisers
# (packer/quant.h) on synthetic Gaussian / heavy-tailed weights with outliers.
add_executable(qp-bench-quant ${CMAKE_CURRENT_LIST_DIR}/bench_quant.c)
target_link_libraries(qp-bench-quant PRIVATE qpquant)
