# tools/cli: what the tools share. test_think_text: the thinking/answer
# splitter against hand-written replies, whatever the pieces they come in.
qp_add_check_test(test_think_text SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_think_text.c LIBS qpcli
                  LABELS cli TIMEOUT 60)
