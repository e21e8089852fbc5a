# blocks_cli: qrun --dump-logits-all and --lookup end to end
# (tests/qrun/test_blocks_cli.sh); needs root
add_test(NAME qrun_blocks
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_blocks_cli.sh
                 $<TARGET_FILE:qrun> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>)
set_tests_properties(qrun_blocks PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS qrun)
