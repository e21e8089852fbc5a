# `qpack pack FILE.gguf` end to end on GGUFs of every type written by
# qp-gguf-write from the model with learned weights (test_gguf_pack.sh).
add_test(NAME qpack_gguf
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_gguf_pack.sh $<TARGET_FILE:qpack> $<TARGET_FILE:qeval>
                 $<TARGET_FILE:qp-gguf-write> $<TARGET_FILE:qp-gen-checkpoint> ${CMAKE_SOURCE_DIR}/tests/data/tiny-learned
                 $<TARGET_FILE:qrun>)
set_tests_properties(qpack_gguf PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900 LABELS "qpack")
