# engine: the forward pass of whole models against the float reference and
# its own invariants (test_forward), the memory rule (test_memory) and the
# big shapes' layers (test_shapes).
qp_add_check_test(test_forward SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_forward.c LIBS qpengine TIMEOUT 900)

# memory: the maps' bytes against QP_MEM_AVAILABLE (engine/memory.h): the
# one-line QP_E_MEMORY refusal before any map, the default context rule
qp_add_check_test(test_memory SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_memory.c LIBS qpengine TIMEOUT 120)

# shapes: one layer of the 4B, 8B and 14B widths, int4 (and q24 at 4B),
# bpf == emu bit for bit and near the float64 reference (~1 min quiet;
# budget 3 min; 10 under the sanitizers, whose host code is slower); needs root
if(QP_SANITIZE)
  set(_shapes_timeout 600)
else()
  set(_shapes_timeout 180)
endif()
qp_add_check_test(test_shapes SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_shapes.c LIBS qpengine TIMEOUT ${_shapes_timeout})
set_tests_properties(test_shapes PROPERTIES SKIP_RETURN_CODE 77 LABELS kernels)
