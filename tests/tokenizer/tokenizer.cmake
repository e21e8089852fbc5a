# Tokenizer tests: exact ids against Hugging Face tokenizers on a committed
# corpus, decoding, streaming, the CLI, and refusal of malformed files.
add_executable(qptok-cli ${CMAKE_CURRENT_LIST_DIR}/tok_cli_tool.c)
target_link_libraries(qptok-cli PRIVATE qptokcli)

qp_add_check_test(test_tokenizer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.c LIBS qptest_tok LABELS tokenizer)

qp_add_check_test(test_tokenizer_errors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_errors.c
    LIBS qptest_tok qptokcli LABELS tokenizer)

# The command line as a person types it (the brief's acceptance check).
add_test(NAME tokenizer_cli_hello_world
         COMMAND sh -c "printf 'Hello, world!' | \"$<TARGET_FILE:qptok-cli>\" tokenize --tokenizer \"${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer/tokenizer.json\"")
set_tests_properties(tokenizer_cli_hello_world PROPERTIES
    PASS_REGULAR_EXPRESSION "^9707 11 1879 0\n$" LABELS tokenizer)
