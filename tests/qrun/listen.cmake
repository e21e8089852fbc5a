# qrun_listen: qrun listen answers UDP token requests in the kernel and qrun
# ask is its client (tests/qrun/test_listen.sh): a greedy continuation over
# loopback in a network namespace of its own and over a veth pair equals
# qrun's, two sessions interleave, malformed packets get their refusals;
# needs root
add_test(NAME qrun_listen
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/test_listen.sh
                 $<TARGET_FILE:qrun> $<TARGET_FILE:qpack> $<TARGET_FILE:qp-gen-checkpoint> ${CMAKE_SOURCE_DIR})
set_tests_properties(qrun_listen PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS qrun)
