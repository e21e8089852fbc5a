# `qpack pack --format int4|int4-pure` and the i4g encoding: codes and
# parameters decoded from the container against packer/quant.h on the
# source, the mixed preset, --keep, bits per weight, search vs rtn, and the
# reader's i4g checks on containers made with the writer.
qp_add_check_test(test_int4_pack SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_pack.c
                  LIBS qpquant LABELS formats packer quant)
