# qeval: packed models against the float64 reference (accuracy, memory,
# speed, per-layer error), a user of include/qpack.h. Its metrics are a
# library of their own for tests/test_qeval.c.
add_library(qevalmetrics STATIC ${CMAKE_CURRENT_LIST_DIR}/qeval_metrics.c)
target_include_directories(qevalmetrics PUBLIC ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(qevalmetrics PUBLIC m)

add_executable(qeval ${CMAKE_CURRENT_LIST_DIR}/qeval.c ${CMAKE_CURRENT_LIST_DIR}/qeval_report.c
               ${CMAKE_CURRENT_LIST_DIR}/qeval_cache.c ${CMAKE_CURRENT_LIST_DIR}/qeval_plot.c)
target_link_libraries(qeval PRIVATE qpack_api qevalmetrics qpcli qpformats PkgConfig::CJSON PkgConfig::XXHASH)
qp_tool(qeval)
