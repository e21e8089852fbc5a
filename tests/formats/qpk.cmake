# The .qpk container end to end: the q24 table, `qpack pack` against an
# independent reference conversion, sharding invariance, `qpack verify` on
# corrupted files, the reader's structural checks, atomic writes, `qpack info`.
qp_add_check_test(test_qpk SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qpk.c ${CMAKE_CURRENT_LIST_DIR}/qpk_test_util.c
                  LIBS qpformats LABELS formats packer)
add_dependencies(test_qpk qp-gen-checkpoint qpack)
target_compile_definitions(test_qpk PRIVATE
    QP_GEN_CHECKPOINT="$<TARGET_FILE:qp-gen-checkpoint>"
    QP_QPACK="$<TARGET_FILE:qpack>")

# Values the kernels cannot compute exactly are refused, never computed
# wrongly: forged containers (checksums recomputed) and extreme checkpoints.
qp_add_check_test(test_qpk_values SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qpk_values.c
                  ${CMAKE_CURRENT_LIST_DIR}/qpk_test_util.c LIBS qpformats PkgConfig::ZSTD LABELS formats packer qrun)
add_dependencies(test_qpk_values qp-gen-checkpoint qpack qrun)
target_compile_definitions(test_qpk_values PRIVATE
    QP_GEN_CHECKPOINT="$<TARGET_FILE:qp-gen-checkpoint>"
    QP_QPACK="$<TARGET_FILE:qpack>" QP_QRUN="$<TARGET_FILE:qrun>")
