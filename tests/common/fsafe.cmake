# Files opened and written safely (common/fsafe.h), JSON read strictly
# (common/json_strict.h) and the growing buffer (common/buf.h): the helpers
# every tool's inputs and outputs go through. The command-line behaviour is
# tests/faults/test_faults.sh (outputs, symlinks, input_fifos, pack_inputs,
# pack_signals).
qp_add_check_test(test_fsafe SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fsafe.c
                  LIBS qpformats LABELS formats TIMEOUT 120)
qp_add_check_test(test_json_strict SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_json_strict.c
                  LIBS qpformats LABELS formats TIMEOUT 120)
qp_add_check_test(test_buf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_buf.c
                  LIBS qpformats LABELS formats TIMEOUT 120)
