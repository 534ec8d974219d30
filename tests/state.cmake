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

# test_guard (issue 22): a state directory's lock, the hardened reader
# (FIFO, sparse and stretched files, foreign states, NaN, two names of one
# step, 5,000 damaged states), the save-load-save round trip, the stop
# flag. test_guard_lock: two CLI runs started together on one directory.
# test_guard_stop: SIGTERM at 10 moments, resumed: the same final weights.
remat_test(test_guard)
set_tests_properties(test_guard PROPERTIES LABELS state TIMEOUT 300)
add_test(NAME test_guard_lock COMMAND test_guard --lock $<TARGET_FILE:remat-cli>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
add_test(NAME test_guard_stop COMMAND test_guard --stop $<TARGET_FILE:remat-cli>
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(test_guard_lock test_guard_stop PROPERTIES LABELS state TIMEOUT 300
                     ENVIRONMENT OPENBLAS_NUM_THREADS=1)

# Numbers are whole tokens: a quoted value with a leading space is refused,
# not read as the number after it (issue 22).
remat_expect(NAME cli_state_keep_space LABELS state RC 2 PATTERN "remat train: bad value ' 3' for --keep"
             COMMAND ${CLI} train --model mlp --data synthetic --state-dir ${CMAKE_CURRENT_BINARY_DIR}/keep_space
                     --keep " 3")
remat_expect(NAME cli_state_lr_space LABELS state RC 2 PATTERN "remat train: bad value ' 0\\.1' for --lr"
             COMMAND ${CLI} train --model mlp --data synthetic --lr " 0.1")
# A 5,000-character state directory: the message shortens the path in its
# middle and keeps the reason (it used to be cut off before it).
string(REPEAT "a" 5000 LONG_NAME)
remat_expect(NAME cli_state_long_dir LABELS state RC 1
             PATTERN "cannot create the state directory /tmp/a+\\.\\.\\.a+/s: File name too long"
             COMMAND ${CLI} train --model mlp --image 1x8x8 --data synthetic --batch 4 --steps 1 --threads 1
                     --state-dir /tmp/${LONG_NAME}/s)

# A soak (issue 22): 20,000 steps saving every 100 with --keep 3; resident
# memory flat after step 1,000 (growth under 2 MiB) and the state directory
# never above keep + 1 files. About 15 s in the Release build; the
# sanitizers' build runs 3,000 steps and bounds only the directory.
add_executable(test_soak test_soak.c)
target_include_directories(test_soak PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
if(REMAT_SANITIZE)
  add_test(NAME test_soak COMMAND test_soak --quick $<TARGET_FILE:remat-cli>)
else()
  add_test(NAME test_soak COMMAND test_soak $<TARGET_FILE:remat-cli>)
endif()
set_tests_properties(test_soak PROPERTIES LABELS "state;slow" TIMEOUT 300 ENVIRONMENT OPENBLAS_NUM_THREADS=1)
