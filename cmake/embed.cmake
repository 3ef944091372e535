# Turns a file into a C++ header holding its bytes (a build step; no downloads). An array of
# bytes, not a string literal: compilers need only accept literals of 65,536 characters.
file(READ ${IN} HEX HEX)
string(LENGTH "${HEX}" HEX_LENGTH)
math(EXPR SIZE "${HEX_LENGTH} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," BYTES "${HEX}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" BYTES "${BYTES}")
get_filename_component(NAME ${IN} NAME_WE)
file(WRITE ${OUT} "// Generated from ${IN}; do not edit.\n#pragma once\n#include <string_view>\n"
  "inline constexpr char k_${NAME}_bytes[] = {\n${BYTES}\n};\n"
  "inline constexpr std::string_view k_${NAME}{k_${NAME}_bytes, ${SIZE}};\n")
