# qeval: its metric functions on hand-computed inputs (test_qeval.c against
# tools/qeval/qeval_metrics.c), and the command end to end on a tiny random
# checkpoint (test_qeval.sh, one ctest test per case; qeval_setup builds the
# checkpoints the others share; the bpf case needs root, skipped otherwise).
qp_add_check_test(test_qeval SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_qeval.c
                  LIBS qevalmetrics LABELS qeval TIMEOUT 60)

set(_qeval_work ${CMAKE_BINARY_DIR}/qeval_e2e)
set(_qeval_cases bpf emu text plot errors lost_output cache sources csv progress signals logits)
add_test(NAME qeval_setup
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_qeval.sh setup
                 $<TARGET_FILE:qeval> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>
                 ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer ${_qeval_work})
set_tests_properties(qeval_setup PROPERTIES FIXTURES_SETUP qeval_model TIMEOUT 300 LABELS qeval)
foreach(_case ${_qeval_cases})
  add_test(NAME qeval_${_case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_qeval.sh ${_case}
                   $<TARGET_FILE:qeval> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>
                   ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer ${_qeval_work} $<TARGET_FILE:qrun>)
  set_tests_properties(qeval_${_case} PROPERTIES FIXTURES_REQUIRED qeval_model
                       SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS qeval)
endforeach()
