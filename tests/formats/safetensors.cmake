# Hugging Face checkpoint formats: the safetensors reader and writer, the
# bf16/f16 conversions, config.json, and the checkpoint generator.
qp_add_check_test(test_safetensors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_safetensors.c
                  LIBS qpformats LABELS formats)
qp_add_check_test(test_hf_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_hf_config.c
                  LIBS qpformats LABELS formats)
qp_add_check_test(test_gen_checkpoint SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gen_checkpoint.c
                  LIBS qpformats LABELS formats)
