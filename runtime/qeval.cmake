# qeval: packed models against the float64 reference (accuracy, memory,
# speed, per-layer error).
add_executable(qeval ${CMAKE_CURRENT_LIST_DIR}/qeval.c)
target_link_libraries(qeval PRIVATE qprun qptok PkgConfig::CJSON)
