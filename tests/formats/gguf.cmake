# The GGUF reader: hand-built blocks, malformed files, every truncation, and
# the tokenizer rebuilt from GGUF metadata on the conformance data
# (test_gguf.c); `qpack pack FILE.gguf` end to end is tests/packer/gguf.cmake.
qp_add_check_test(test_gguf SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gguf.c ${CMAKE_SOURCE_DIR}/tests/tokenizer/tok_test_util.c
                  LIBS qpformats qptok LABELS formats TIMEOUT 180)
target_include_directories(test_gguf PRIVATE ${CMAKE_SOURCE_DIR}/tests/tokenizer)
