# schedule_cli: qrun, qrun serve and qeval --schedule kernel against
# --schedule host (and qrun's against emu), bit for bit
# (tests/qrun/test_schedule_cli.sh); needs root
add_test(NAME qrun_schedule
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_schedule_cli.sh
                 $<TARGET_FILE:qrun> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>
                 $<TARGET_FILE:qeval> ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer)
set_tests_properties(qrun_schedule PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS qrun)
