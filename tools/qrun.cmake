# qrun: generate text, chat, and the tokenizer's tokenize/detokenize
# subcommands (tok_cli.c, also the tests' qptok-cli). qrun is a user of
# include/qpack.h (qpack_api): its files include qpack.h and the CLI helpers
# only (tests/test_tools_api.sh checks it).
add_library(qptokcli STATIC ${CMAKE_CURRENT_LIST_DIR}/tok_cli.c)
target_include_directories(qptokcli PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(qptokcli PUBLIC qptok)

# what qrun and qeval share: numbers from the command line, the progress
# line, stop strings
add_library(qpcli STATIC ${CMAKE_CURRENT_LIST_DIR}/cli_num.c ${CMAKE_CURRENT_LIST_DIR}/progress.c
            ${CMAKE_CURRENT_LIST_DIR}/stop_text.c)
target_include_directories(qpcli PUBLIC ${CMAKE_CURRENT_LIST_DIR})

add_executable(qrun ${CMAKE_CURRENT_LIST_DIR}/qrun.c ${CMAKE_CURRENT_LIST_DIR}/qrun_options.c
               ${CMAKE_CURRENT_LIST_DIR}/qrun_chat.c ${CMAKE_CURRENT_LIST_DIR}/tok_cli_qpk.c)
target_link_libraries(qrun PRIVATE qpack_api qpcli qptokcli qpformats)
qp_tool(qrun)
