# qrun: the runtime library (plan, kernels' host twin, BPF loader, scheduler,
# float reference, sampler) and the qrun command.
add_library(qprun STATIC
    ${CMAKE_CURRENT_LIST_DIR}/plan.c
    ${CMAKE_CURRENT_LIST_DIR}/emu.c
    ${CMAKE_CURRENT_LIST_DIR}/bpf_backend.c
    ${CMAKE_CURRENT_LIST_DIR}/forward.c
    ${CMAKE_CURRENT_LIST_DIR}/ref.c
    ${CMAKE_CURRENT_LIST_DIR}/session.c
    ${CMAKE_CURRENT_LIST_DIR}/sampler.c
)
add_dependencies(qprun qrun_skel)
target_include_directories(qprun PUBLIC ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_SOURCE_DIR}/bpf ${BPF_SKEL_DIR})
target_link_libraries(qprun PUBLIC qpformats PkgConfig::LIBBPF PkgConfig::LIBELF Threads::Threads m)
# the kernels' host twin uses clang loop pragmas and BPF-style code
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/emu.c PROPERTIES COMPILE_OPTIONS "-Wno-unknown-pragmas")

add_executable(qrun ${CMAKE_CURRENT_LIST_DIR}/qrun.c)
target_link_libraries(qrun PRIVATE qprun qptok)
