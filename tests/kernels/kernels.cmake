# kernels: qmath's functions (test_qmath against its BPF build,
# qmath_test.bpf.c) and every kernel, BPF build against the host twin
# (test_kernels); the 8-bit KV cache's lanes (test_kv8).
add_bpf_skeleton(qmath_test ${CMAKE_CURRENT_LIST_DIR}/qmath_test.bpf.c
                 DEPENDS ${CMAKE_SOURCE_DIR}/kernels/qmath.h ${CMAKE_CURRENT_LIST_DIR}/qmath_test.h)
qp_add_check_test(test_qmath SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qmath.c LIBS qpengine)
add_dependencies(test_qmath qmath_test_skel)
target_include_directories(test_qmath PRIVATE ${CMAKE_SOURCE_DIR}/kernels ${CMAKE_CURRENT_LIST_DIR} ${BPF_SKEL_DIR})
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/test_qmath.c PROPERTIES COMPILE_OPTIONS "-Wno-unknown-pragmas")

qp_add_check_test(test_kernels SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels.c LIBS qpengine TIMEOUT 600)


# the 8-bit KV cache's lane arithmetic against plain sums (host only)
qp_add_check_test(test_kv8 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv8.c TIMEOUT 120)
target_include_directories(test_kv8 PRIVATE ${CMAKE_SOURCE_DIR}/kernels)
