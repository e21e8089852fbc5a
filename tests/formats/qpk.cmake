# The .qpk container end to end: the q24 table, `qpack pack` against an
# independent reference conversion, sharding invariance, `qpack verify` on
# corrupted files, the reader's structural checks, atomic writes, `qpack info`.
qp_add_check_test(test_qpk SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qpk.c LIBS qpformats LABELS formats packer)

# Values the kernels cannot compute exactly are refused, never computed
# wrongly: forged containers (checksums recomputed) and extreme checkpoints.
qp_add_check_test(test_qpk_values SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qpk_values.c
                  LIBS qpformats PkgConfig::ZSTD LABELS formats packer qrun)
add_dependencies(test_qpk_values qrun)
target_compile_definitions(test_qpk_values PRIVATE QP_QRUN="$<TARGET_FILE:qrun>")
