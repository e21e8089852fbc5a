# The INT4/INT8 group quantisers (formats/quant.h): pf16 parameters, search
# never worse than RTN, exact grids, tensors, the same bits from the AVX2
# clone and the generic code; prints the 1M-weight measurement.
# formats/quant.c is built a second time for it without the AVX2 clone and
# with its functions renamed qnt_generic_* (tests/quant_generic.h).
add_library(qp_quant_generic OBJECT ${CMAKE_SOURCE_DIR}/formats/quant.c)
target_include_directories(qp_quant_generic PRIVATE ${CMAKE_SOURCE_DIR}/formats ${CMAKE_SOURCE_DIR}/common)
target_compile_options(qp_quant_generic PRIVATE -ffp-contract=off -Wno-psabi
                       -include ${CMAKE_CURRENT_LIST_DIR}/quant_generic.h)
qp_add_check_test(test_quant SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_quant.c $<TARGET_OBJECTS:qp_quant_generic>
                  LIBS qpformats m LABELS formats quant)
