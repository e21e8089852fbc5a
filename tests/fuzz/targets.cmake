# The fuzz targets and what each links; shared by tests/fuzz/replay.cmake (replay
# tests in every build) and tests/fuzz/CMakeLists.txt (libFuzzer, QP_FUZZ).
set(QP_FUZZ_TARGETS
    fuzz_qpk
    fuzz_safetensors
    fuzz_safetensors_index
    fuzz_tokenizer_load
    fuzz_tokenizer_encode
    fuzz_config
    fuzz_serve_request
    fuzz_gen_config
    fuzz_gguf
    fuzz_kvfile)
set(QP_FUZZ_LIBS_fuzz_qpk qpformats)
set(QP_FUZZ_LIBS_fuzz_safetensors qpformats)
set(QP_FUZZ_LIBS_fuzz_safetensors_index qpformats)
set(QP_FUZZ_LIBS_fuzz_tokenizer_load qptok)
set(QP_FUZZ_LIBS_fuzz_tokenizer_encode qptok)
set(QP_FUZZ_LIBS_fuzz_config qpformats)
set(QP_FUZZ_LIBS_fuzz_serve_request qpserve)
set(QP_FUZZ_LIBS_fuzz_gen_config qpformats)
set(QP_FUZZ_LIBS_fuzz_gguf qpformats qptok)
set(QP_FUZZ_LIBS_fuzz_kvfile qpformats)
set(QP_FUZZ_DEFS
    QP_FUZZ_TOKENIZER_PATH="${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer/tokenizer.json")
