# Writes the C code between "<!-- example:begin -->" and "<!-- example:end -->"
# in README.md (inside a ```c fence) to OUT.
file(READ ${README} text)
string(FIND "${text}" "<!-- example:begin -->" b)
string(FIND "${text}" "<!-- example:end -->" e)
if(b EQUAL -1 OR e EQUAL -1)
  message(FATAL_ERROR "README.md has no example markers")
endif()
math(EXPR len "${e} - ${b}")
string(SUBSTRING "${text}" ${b} ${len} block)
string(REGEX REPLACE "^[^\n]*\n```c\n" "" block "${block}")
string(REGEX REPLACE "```[ \n]*$" "" block "${block}")
file(WRITE ${OUT} "${block}")
