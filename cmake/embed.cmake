# Turns a text file into a C++ header holding it as a raw string literal (build step, no downloads).
file(READ ${IN} CONTENT)
get_filename_component(NAME ${IN} NAME_WE)
file(WRITE ${OUT} "// Generated from ${IN}; do not edit.\n#pragma once\n#include <string_view>\n"
  "inline constexpr std::string_view k_${NAME} = R\"cudafix_embed(${CONTENT})cudafix_embed\";\n")
