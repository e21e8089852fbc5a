# Fuzz targets (tests/fuzz/*.c) replayed without libFuzzer: each target's
# LLVMFuzzerTestOneInput linked with a small main that reads files, run by
# ctest over the committed seed corpus and every committed regression input.
# Under -DQP_SANITIZE=ON these replays run with ASan+UBSan. The libFuzzer
# builds themselves come from tests/fuzz/CMakeLists.txt (-DQP_FUZZ=ON,
# scripts/fuzz.sh).
set(QP_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
include(${QP_FUZZ_DIR}/targets.cmake)

foreach(_t ${QP_FUZZ_TARGETS})
  add_executable(${_t}_replay ${QP_FUZZ_DIR}/${_t}.c ${QP_FUZZ_DIR}/replay_main.c)
  target_link_libraries(${_t}_replay PRIVATE ${QP_FUZZ_LIBS_${_t}})
  target_compile_definitions(${_t}_replay PRIVATE ${QP_FUZZ_DEFS})
  add_test(NAME ${_t}_replay
           COMMAND ${_t}_replay ${QP_FUZZ_DIR}/corpus/${_t} ${QP_FUZZ_DIR}/regressions/${_t})
  set_tests_properties(${_t}_replay PROPERTIES LABELS fuzz TIMEOUT 600)
endforeach()
