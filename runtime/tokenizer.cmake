# tokenizer: the exact Qwen3 (Hugging Face byte-level BPE) tokenizer, chat
# wrapping and the tokenize/detokenize subcommands (tok_cli_main).
add_library(qptok STATIC
    ${CMAKE_CURRENT_LIST_DIR}/tok_buf.c
    ${CMAKE_CURRENT_LIST_DIR}/tok_mem.c
    ${CMAKE_CURRENT_LIST_DIR}/utf8_stream.c
    ${CMAKE_CURRENT_LIST_DIR}/tok_json.c
    ${CMAKE_CURRENT_LIST_DIR}/tok_load.c
    ${CMAKE_CURRENT_LIST_DIR}/tok_config.c
    ${CMAKE_CURRENT_LIST_DIR}/tok_regex.c
    ${CMAKE_CURRENT_LIST_DIR}/tok_nfc.c
    ${CMAKE_CURRENT_LIST_DIR}/bpe.c
    ${CMAKE_CURRENT_LIST_DIR}/tokenizer.c
    ${CMAKE_CURRENT_LIST_DIR}/chat.c
    ${CMAKE_CURRENT_LIST_DIR}/tok_cli.c
)
target_include_directories(qptok PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(qptok PUBLIC qpformats
    PkgConfig::PCRE2 PkgConfig::UTF8PROC PkgConfig::CJSON PkgConfig::XXHASH)
