# The GGUF reader: hand-built blocks, malformed files, every truncation, and
# the tokenizer rebuilt from GGUF metadata on the conformance data
# (test_gguf.c); `qpack pack FILE.gguf` end to end is tests/packer/gguf.cmake.
qp_add_check_test(test_gguf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf.c
                  LIBS qpformats qptest_tok LABELS formats TIMEOUT 180)
