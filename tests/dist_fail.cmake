# dist_fail.cmake: a job that must fail, on every rank, fast: the exit
# status is not 0, the output matches PATTERN, and it all takes less than
# LIMIT seconds (a rank left waiting for another would hang until the
# timeout, which fails the test).
#
#   cmake -DCMD=mpirun|-np|2|prog|... -DPATTERN=regex -DLIMIT=30 -P dist_fail.cmake
#
# CMD's words are separated by "|" (see expect.cmake).
if(NOT DEFINED CMD OR NOT DEFINED PATTERN OR NOT DEFINED LIMIT)
  message(FATAL_ERROR "dist_fail.cmake needs -DCMD=..., -DPATTERN=... and -DLIMIT=...")
endif()
string(REPLACE "|" ";" argv "${CMD}")
string(REPLACE ";" " " shown "${argv}")
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${argv} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${LIMIT})
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
set(all "${out}${err}")
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "${shown}\ndid not end within ${LIMIT} s (${rc}): a rank was left waiting; it printed:\n${all}")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "${shown}\nexited with 0, expected a failure; it printed:\n${all}")
endif()
if(NOT all MATCHES "${PATTERN}")
  message(FATAL_ERROR "${shown}\nfailed (${rc}) as expected, but its output does not match\n  ${PATTERN}\nit printed:\n${all}")
endif()
message(STATUS "failed with ${rc} in ${took} s, as expected:\n${all}")
