# qrun_cli: the qrun command end to end (tests/qrun/test_qrun_cli.sh), one ctest
# test per case. qrun_cli_setup packs a tiny random model the others share;
# cases that load BPF programs need root (skipped otherwise). The lifecycle
# case counts the machine's BPF programs, so it runs alone.
set(_qrun_cli_work ${CMAKE_BINARY_DIR}/qrun_cli)
set(_qrun_cli_cases tokenize generate emu_bpf chat interactive bad_args context lifecycle unprivileged
    lost_output closed_pipe detokenize prompt_sources stop sampling chat_commands chat_thinking chat_keys progress stats generation_config pooling notes chat_budget info_units
    prompt_cache)

add_test(NAME qrun_cli_setup
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_qrun_cli.sh setup
                 $<TARGET_FILE:qrun> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>
                 ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer ${_qrun_cli_work})
set_tests_properties(qrun_cli_setup PROPERTIES FIXTURES_SETUP qrun_cli_model SKIP_RETURN_CODE 77
                     TIMEOUT 300 LABELS qrun)

foreach(_case ${_qrun_cli_cases})
  add_test(NAME qrun_cli_${_case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_qrun_cli.sh ${_case}
                   $<TARGET_FILE:qrun> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>
                   ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer ${_qrun_cli_work})
  set_tests_properties(qrun_cli_${_case} PROPERTIES FIXTURES_REQUIRED qrun_cli_model
                       SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS qrun)
endforeach()
set_tests_properties(qrun_cli_lifecycle PROPERTIES RUN_SERIAL TRUE)
