# qp-dequant: a container's weights as float32 safetensors, for splitting
# its error into the weights' share and the kernels' (scripts/accuracy_sizes.sh).
add_executable(qp-dequant ${CMAKE_CURRENT_LIST_DIR}/dequant.c)
target_link_libraries(qp-dequant PRIVATE qpquant m)
