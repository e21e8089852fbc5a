# qp-bench-map-touch: the cost of the first write into fresh BPF array-map
# memory on this host (the floor under qrun's weight copy).
add_executable(qp-bench-map-touch ${CMAKE_CURRENT_LIST_DIR}/bench_map_touch.c)
target_link_libraries(qp-bench-map-touch PRIVATE PkgConfig::LIBBPF Threads::Threads)
target_include_directories(qp-bench-map-touch PRIVATE ${CMAKE_SOURCE_DIR}/common)
