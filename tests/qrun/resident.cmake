# resident: models loaded once and pinned (qpack load, -m pin:NAME) end to
# end (tests/qrun/test_resident.sh), one ctest test per case. resident_setup
# packs a tiny model as q24 and int4 and a stress checkpoint; every case
# needs root (skipped otherwise) and unloads what it loaded.
set(_resident_work ${CMAKE_BINARY_DIR}/resident)
set(_resident_cases same_bits refusals sessions unprivileged lifecycle)

add_test(NAME resident_setup
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_resident.sh setup
                 $<TARGET_FILE:qrun> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>
                 ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer ${_resident_work})
set_tests_properties(resident_setup PROPERTIES FIXTURES_SETUP resident_models SKIP_RETURN_CODE 77
                     TIMEOUT 300 LABELS qrun)

foreach(_case ${_resident_cases})
  add_test(NAME resident_${_case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_resident.sh ${_case}
                   $<TARGET_FILE:qrun> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>
                   ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer ${_resident_work})
  set_tests_properties(resident_${_case} PROPERTIES FIXTURES_REQUIRED resident_models
                       SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS qrun)
endforeach()
