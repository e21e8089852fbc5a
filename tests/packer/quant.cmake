# The INT4/INT8 group quantisers (packer/quant.h): pf16 parameters, search
# never worse than RTN, exact grids, tensors, the same bits from the AVX2
# clone and the generic code; prints the 1M-weight measurement.
# packer/quant.c is built a second time for it without the AVX2 clone and
# with its functions renamed qnt_generic_* (quant_generic.h).
add_library(qp_quant_generic OBJECT ${CMAKE_SOURCE_DIR}/packer/quant.c)
target_link_libraries(qp_quant_generic PRIVATE qpformats)
target_compile_options(qp_quant_generic PRIVATE -ffp-contract=off -Wno-psabi
                       -include ${CMAKE_CURRENT_LIST_DIR}/quant_generic.h)
qp_add_check_test(test_quant SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant.c $<TARGET_OBJECTS:qp_quant_generic>
                  LIBS qpquant m LABELS packer quant)
