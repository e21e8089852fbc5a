# qp-accuracy: logit error, KL and top-1 agreement against the float64
# reference (scripts/accuracy.sh).
add_executable(qp-accuracy ${CMAKE_CURRENT_LIST_DIR}/accuracy.c)
target_link_libraries(qp-accuracy PRIVATE qprun)
