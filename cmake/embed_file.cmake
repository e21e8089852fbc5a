# embed_file.cmake -DIN=FILE -DOUT=FILE.c -DNAME=SYMBOL: writes a C file
# defining `const char SYMBOL[]` (FILE's bytes and a NUL) and
# `const size_t SYMBOL_len` (without the NUL), so a file ships inside a
# program with no tool but CMake.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" digits)
math(EXPR bytes "${digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," array "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n    " array "${array}")
get_filename_component(from ${IN} NAME)
file(WRITE ${OUT}.tmp "/* generated from ${from} by cmake/embed_file.cmake: do not edit */\n#include <stddef.h>\n\n"
     "const char ${NAME}[] = {\n    ${array}0x00};\nconst size_t ${NAME}_len = ${bytes};\n")
file(RENAME ${OUT}.tmp ${OUT})
