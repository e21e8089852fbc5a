# qp-accuracy: logit error, KL and top-1 agreement against the float64
# reference (scripts/accuracy.sh).
add_executable(qp-accuracy ${CMAKE_CURRENT_LIST_DIR}/accuracy.c ${CMAKE_SOURCE_DIR}/tools/qeval/qeval_metrics.c)
target_include_directories(qp-accuracy PRIVATE ${CMAKE_SOURCE_DIR}/tools/qeval ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(qp-accuracy PRIVATE qpengine)
