# qptok-bench: tokenizer load time and encode throughput (scripts/bench_tokenizer.sh).
add_executable(qptok-bench ${CMAKE_CURRENT_LIST_DIR}/bench_tokenizer.c)
target_link_libraries(qptok-bench PRIVATE qptok)
