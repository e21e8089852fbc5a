# qrun serve (tools/serve*.c).
# test_serve_openai: stop strings, request and response bodies, no model.
qp_add_check_test(test_serve_openai SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serve_openai.c
                  LIBS qpserve PkgConfig::CJSON LABELS serve TIMEOUT 120)

# test_serve_anthropic: Anthropic's Messages API, its requests, replies,
# events and errors, no model.
qp_add_check_test(test_serve_anthropic SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serve_anthropic.c
                  LIBS qpserve PkgConfig::CJSON LABELS serve TIMEOUT 120)

# test_serve_format: response_format's machine on documents and on random
# replies from a small vocabulary, no model.
qp_add_check_test(test_serve_format SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_serve_format.c
                  LIBS qpserve PkgConfig::CJSON LABELS serve TIMEOUT 120)

# test_serve.sh: the server end to end with real clients, one ctest test per
# case. serve_setup packs a tiny model and installs the JavaScript clients
# (npm ci: the openai package, @anthropic-ai/sdk, @langchain/openai and playwright-core) into the build folder.
# Cases on bpf need root (skipped otherwise) and run alone: the load test
# and the signals test count the BPF objects the server held.
set(_serve_work ${CMAKE_BINARY_DIR}/serve)
set(_serve_args $<TARGET_FILE:qrun> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint>
    ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer ${_serve_work} ${CMAKE_SOURCE_DIR})
add_test(NAME serve_setup COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_serve.sh setup ${_serve_args})
set_tests_properties(serve_setup PROPERTIES FIXTURES_SETUP serve_model SKIP_RETURN_CODE 77 TIMEOUT 360
                     LABELS serve)
foreach(_case endpoints errors clients choices openai responses anthropic reasoning tools formats embeddings rerank browser signals queue_zero hostile crowded load lookup
              kv8 slots models)
  add_test(NAME serve_${_case} COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_serve.sh ${_case} ${_serve_args})
  set_tests_properties(serve_${_case} PROPERTIES FIXTURES_REQUIRED serve_model SKIP_RETURN_CODE 77 TIMEOUT 300
                       LABELS serve)
endforeach()
set_tests_properties(serve_load serve_signals serve_hostile serve_crowded PROPERTIES RUN_SERIAL TRUE)
