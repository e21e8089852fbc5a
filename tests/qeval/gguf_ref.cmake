# gguf_ref: qeval compares a container packed from a GGUF with its Hugging
# Face original, the configs compared to the precision the GGUF stores, and
# with the GGUF itself as the reference (tests/qeval/test_gguf_ref.sh, the
# model with learned weights).
add_test(NAME qeval_gguf_ref
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_gguf_ref.sh
                 $<TARGET_FILE:qpack> $<TARGET_FILE:qeval> $<TARGET_FILE:qp-gguf-write>
                 ${CMAKE_SOURCE_DIR}/tests/data/tiny-learned $<TARGET_FILE:qrun>)
set_tests_properties(qeval_gguf_ref PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "qeval;qpack")
