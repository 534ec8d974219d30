# expect.cmake: runs a command and checks both its exit status and what it
# prints, for the command line's failure tests (hostile.cmake).
#
#   cmake -DCMD=prog|arg|arg -DRC=1 -DPATTERN=regex [-DNOT_PATTERN=regex] -P expect.cmake
#
# CMD's words are separated by "|" (a ";" would be split by add_test). The
# exit status must equal RC as a number (a crash, which execute_process
# reports as text, never does); stdout and stderr together must match
# PATTERN (a CMake regular expression: make it specific, "limit 1 million"
# rather than "1") and, when given, must not match NOT_PATTERN. Fails with
# a message that shows the command, the status and the output.
if(NOT DEFINED CMD OR NOT DEFINED RC OR NOT DEFINED PATTERN)
  message(FATAL_ERROR "expect.cmake needs -DCMD=..., -DRC=... and -DPATTERN=...")
endif()
string(REPLACE "|" ";" argv "${CMD}")
execute_process(COMMAND ${argv} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 110)  # below the test's 120 s: a sanitized build on a loaded machine is slow
set(all "${out}${err}")
string(REPLACE ";" " " shown "${argv}")
if(NOT rc MATCHES "^[0-9]+$" OR NOT rc EQUAL RC)
  message(FATAL_ERROR "${shown}\nexited with '${rc}', expected ${RC}; it printed:\n${all}")
endif()
if(NOT all MATCHES "${PATTERN}")
  message(FATAL_ERROR "${shown}\nexited with ${rc} as expected, but its output does not match\n  ${PATTERN}\nit printed:\n${all}")
endif()
if(DEFINED NOT_PATTERN AND all MATCHES "${NOT_PATTERN}")
  message(FATAL_ERROR "${shown}\nprinted what it must not (${NOT_PATTERN}):\n${all}")
endif()
message(STATUS "exit status ${rc} and output as expected:\n${all}")
