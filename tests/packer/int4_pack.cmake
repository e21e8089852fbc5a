# `qpack pack --format int4|int4-pure` and the i4g encoding: codes and
# parameters decoded from the container against packer/quant.h on the
# source, the mixed preset, --keep, bits per weight, search vs rtn, and the
# reader's i4g checks on containers made with the writer.
qp_add_check_test(test_int4_pack
                  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_pack.c ${CMAKE_SOURCE_DIR}/tests/formats/qpk_test_util.c
                  LIBS qpquant LABELS formats packer quant)
target_include_directories(test_int4_pack PRIVATE ${CMAKE_SOURCE_DIR}/tests/formats)
add_dependencies(test_int4_pack qp-gen-checkpoint qpack)
target_compile_definitions(test_int4_pack PRIVATE
    QP_GEN_CHECKPOINT="$<TARGET_FILE:qp-gen-checkpoint>"
    QP_QPACK="$<TARGET_FILE:qpack>")
