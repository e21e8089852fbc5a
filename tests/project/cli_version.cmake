# cli_version: `--version` of every tool (tests/project/test_cli_version.sh) against
# CMake's project version and the git history of the source tree, and the
# commit header's generator outside a git checkout (a source tarball).
add_test(NAME cli_version
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_cli_version.sh ${PROJECT_VERSION} ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:qpack> $<TARGET_FILE:qrun> $<TARGET_FILE:qeval> $<TARGET_FILE:qp-gen-checkpoint>)
set_tests_properties(cli_version PROPERTIES TIMEOUT 60 LABELS cli)
