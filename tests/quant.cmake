# The INT4/INT8 group quantisers (formats/quant.h): pf16 parameters, search
# never worse than RTN, exact grids, tensors; prints the 1M-weight measurement.
qp_add_check_test(test_quant SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant.c
                  LIBS qpformats m LABELS formats quant)
