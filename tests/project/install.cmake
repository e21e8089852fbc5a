# `cmake --install` into a fresh prefix, and examples/generate.c built from it
# through pkg-config, shared and static (tests/project/test_install.sh).
add_test(NAME install_prefix
         COMMAND env CC=${CMAKE_C_COMPILER} QP_SANITIZE=$<BOOL:${QP_SANITIZE}>
                 bash ${CMAKE_CURRENT_LIST_DIR}/test_install.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                 ${CMAKE_SOURCE_DIR}/assets/qwen3-tokenizer)
set_tests_properties(install_prefix PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "qrun;packer")
# README.md's set-up line and command block, run as written against the
# installed commands (tests/project/test_readme.sh)
add_test(NAME readme_commands
         COMMAND env CC=${CMAKE_C_COMPILER} QP_SANITIZE=$<BOOL:${QP_SANITIZE}>
                 bash ${CMAKE_CURRENT_LIST_DIR}/test_readme.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(readme_commands PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "qrun;packer")
