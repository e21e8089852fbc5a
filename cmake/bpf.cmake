# BPF objects and their libbpf skeletons.
#
# clang-19 with -mcpu=v4 (sign-extending loads, signed division) when it is
# installed, else the default clang with -mcpu=v3. The kernel sources are
# plain C; the generated <name>.skel.h lands in the build tree.

find_program(BPF_CLANG NAMES clang-19 clang REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)

execute_process(COMMAND ${BPF_CLANG} --version OUTPUT_VARIABLE _bpf_clang_version)
if(_bpf_clang_version MATCHES "version (1[9]|[2-9][0-9])\\.")
  set(BPF_CPU v4)
else()
  set(BPF_CPU v3)
endif()
message(STATUS "BPF compiler: ${BPF_CLANG} -mcpu=${BPF_CPU}")

execute_process(COMMAND ${CMAKE_C_COMPILER} -dumpmachine
                OUTPUT_VARIABLE _bpf_multiarch OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REGEX REPLACE "-(pc|unknown)-linux" "-linux" _bpf_multiarch "${_bpf_multiarch}")  # clang: x86_64-pc-linux-gnu

set(BPF_SKEL_DIR ${CMAKE_BINARY_DIR}/skel)
file(MAKE_DIRECTORY ${BPF_SKEL_DIR})

# add_bpf_skeleton(<name> <source.bpf.c> [DEPENDS headers...])
# produces ${BPF_SKEL_DIR}/<name>.skel.h and target <name>_skel
function(add_bpf_skeleton name src)
  cmake_parse_arguments(ARG "" "" "DEPENDS" ${ARGN})
  if(NOT IS_ABSOLUTE ${src})
    set(src ${CMAKE_CURRENT_SOURCE_DIR}/${src})
  endif()
  set(obj ${CMAKE_CURRENT_BINARY_DIR}/${name}.bpf.o)
  set(skel ${BPF_SKEL_DIR}/${name}.skel.h)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${BPF_CLANG} -g -O2 -target bpf -mcpu=${BPF_CPU}
            -D__TARGET_ARCH_x86 -DQP_BPF_CPU_${BPF_CPU}
            -Wall -Wextra -Werror -Wno-unused-parameter
            -I/usr/include/${_bpf_multiarch} -I${CMAKE_SOURCE_DIR}/kernels
            -c ${src} -o ${obj}
    DEPENDS ${src} ${ARG_DEPENDS}
    COMMENT "BPF ${name}.bpf.c")
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name} > ${skel}.tmp
    COMMAND ${CMAKE_COMMAND} -E rename ${skel}.tmp ${skel}
    DEPENDS ${obj}
    COMMENT "skeleton ${name}.skel.h")
  add_custom_target(${name}_skel DEPENDS ${skel})
endfunction()
