# qp-gen-checkpoint: random Qwen3 checkpoints in Hugging Face layout, for
# tests (tiny) and benchmarks (real shapes); deterministic from --seed.
add_executable(qp-gen-checkpoint ${CMAKE_CURRENT_LIST_DIR}/gen_checkpoint.c)
target_link_libraries(qp-gen-checkpoint PRIVATE qpformats qptok qpcli)
qp_tool(qp-gen-checkpoint)
