# qpack pack --calibrate: the reference's input statistics against the
# tensors, calib_run's means, the quantiser's choice moving with the
# calibrated weights (test_calibrate.c, packer/calibrate.c compiled in), and
# the command end to end on the model with learned weights
# (test_calibrate.sh: provenance, what it refuses).
qp_add_check_test(test_calibrate
                  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_calibrate.c ${CMAKE_SOURCE_DIR}/packer/calibrate.c
                  LIBS qpquant qpengine qptok qpformats LABELS packer quant TIMEOUT 120)
target_include_directories(test_calibrate PRIVATE ${CMAKE_SOURCE_DIR}/packer)
add_test(NAME qpack_calibrate
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_calibrate.sh $<TARGET_FILE:qpack>
                 ${CMAKE_SOURCE_DIR}/tests/data/tiny-learned)
set_tests_properties(qpack_calibrate PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120 LABELS "qpack")
