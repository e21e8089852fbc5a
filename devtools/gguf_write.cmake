# qp-gguf-write: a Hugging Face folder as a GGUF of chosen ggml types, for
# the tests of `qpack pack FILE.gguf` (tests/packer/gguf.cmake).
add_executable(qp-gguf-write ${CMAKE_CURRENT_LIST_DIR}/gguf_write.c)
target_link_libraries(qp-gguf-write PRIVATE qpformats m)
