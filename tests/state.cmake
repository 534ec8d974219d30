# state.cmake: training states (issue 12). test_state: bitwise resume
# (cnn with dropout, a BatchNorm network, an IDX data set; under other
# strategies and budgets), refusals, the fuzzed reader, atomic writes.
# test_state_kill: `remat train --save-every 1` killed with SIGKILL at 20
# moments, resumed each time, ends with the uninterrupted run's weights.

remat_test(test_state)
set_tests_properties(test_state PROPERTIES LABELS state TIMEOUT 300)
add_test(NAME test_state_kill COMMAND test_state --kill $<TARGET_FILE:remat-cli>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(test_state_kill PROPERTIES LABELS state TIMEOUT 300 ENVIRONMENT OPENBLAS_NUM_THREADS=1)
