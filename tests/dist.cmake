# dist.cmake: data-parallel training (issue 11), under mpirun when this
# build has MPI (REMAT_MPI), else one rank only.
#
# test_dist: plans x ranks on Fashion-MNIST, bitwise (see its header), the
# communicator, and failures that every rank reports; alone (1 rank) and
# under mpirun with 4 ranks (15 steps) and 2 (10). test_dist_abort: a rank that fails
# alone in the middle of a step ends the job within seconds.
# cli_dist_same: `remat train` on 1, 2 and 4 ranks and resumed across
# rank counts gives the same weights, file for file. cli_dist_*: a rank
# that fails (its data, a flag) or a budget that fits nowhere stops every
# rank, naming it, within 30 s; `remat bench` under mpirun.
#
# As root, Open MPI's mpirun needs OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM); four
# ranks on fewer cores need --oversubscribe (Open MPI's flag).

set(REMAT_DIST_ENV OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    OMPI_MCA_rmaps_base_oversubscribe=1)
if(REMAT_SANITIZE)
  # Open MPI keeps some of its own allocations until exit: suppressed by
  # library; the slow unwinder gives whole stacks (the fast one stops in
  # libraries without frame pointers, and the leaks look like remat's own)
  list(APPEND REMAT_DIST_ENV "ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0"
       "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_mpi.supp:print_suppressions=0")
  set(REMAT_DIST_QUICK --quick)
endif()

add_executable(test_dist test_dist.c)
target_include_directories(test_dist PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(test_dist PRIVATE ${REMAT_TEST_LIBS})
# alone: one rank, gradient accumulation, every plan (fewer steps: one
# process computes every job)
add_test(NAME test_dist_alone COMMAND test_dist --steps 5 ${REMAT_DIST_QUICK} WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(test_dist_alone PROPERTIES LABELS dist TIMEOUT 600 ENVIRONMENT "${REMAT_DIST_ENV}")

# on a device (issue 21): ranks sharing one GPU give one rank's bits,
# predicted == measured device bytes per rank (test_dist_device.c). Here
# on the CPU through the GPU's host-staged reduction (REMAT_DP_STAGING),
# and on CUDA (label cuda: exits 77, skipped, without a GPU).
add_executable(test_dist_device test_dist_device.c)
target_include_directories(test_dist_device PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(test_dist_device PRIVATE ${REMAT_TEST_LIBS})
add_test(NAME test_dist_device_alone COMMAND test_dist_device --device cpu --steps 5)
set_tests_properties(test_dist_device_alone PROPERTIES LABELS dist TIMEOUT 300
                     ENVIRONMENT "${REMAT_DIST_ENV};REMAT_DP_STAGING=host")

# against PyTorch DDP (bench/torch/ddp_fixture.py's fixture): alone here,
# with 2 ranks below
add_executable(test_dist_ddp test_dist_ddp.c)
target_include_directories(test_dist_ddp PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(test_dist_ddp PRIVATE ${REMAT_TEST_LIBS})
add_test(NAME test_dist_ddp COMMAND test_dist_ddp WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(test_dist_ddp PROPERTIES LABELS dist TIMEOUT 300 ENVIRONMENT "${REMAT_DIST_ENV}")

if(REMAT_MPI)
  set(REMAT_MPIRUN ${MPIEXEC_EXECUTABLE} ${MPIEXEC_PREFLAGS})
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE mpi_version ERROR_QUIET)
  if(mpi_version MATCHES "Open MPI|OpenRTE")
    list(APPEND REMAT_MPIRUN --oversubscribe)
  endif()
  list(APPEND REMAT_MPIRUN ${MPIEXEC_NUMPROC_FLAG})
  string(REPLACE ";" "|" REMAT_MPIRUN_BAR "${REMAT_MPIRUN}")
  set(CLI $<TARGET_FILE:remat-cli>)

  add_test(NAME test_dist_np4 COMMAND ${REMAT_MPIRUN} 4 $<TARGET_FILE:test_dist> --steps 15 ${REMAT_DIST_QUICK}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  add_test(NAME test_dist_np2 COMMAND ${REMAT_MPIRUN} 2 $<TARGET_FILE:test_dist> --steps 10 ${REMAT_DIST_QUICK}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  add_test(NAME test_dist_ddp_np2 COMMAND ${REMAT_MPIRUN} 2 $<TARGET_FILE:test_dist_ddp>
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(test_dist_np4 test_dist_np2 test_dist_ddp_np2 PROPERTIES LABELS dist TIMEOUT 600
                       ENVIRONMENT "${REMAT_DIST_ENV}")

  add_test(NAME test_dist_device_np2 COMMAND ${REMAT_MPIRUN} 2 $<TARGET_FILE:test_dist_device> --device cpu --steps 20)
  set_tests_properties(test_dist_device_np2 PROPERTIES LABELS dist TIMEOUT 600
                       ENVIRONMENT "${REMAT_DIST_ENV};REMAT_DP_STAGING=host")
  if(REMAT_CUDA)
    # two ranks sharing the one GPU, 20 steps; exits 77 where none is visible
    add_test(NAME test_dist_device_cuda_np2 COMMAND ${REMAT_MPIRUN} 2 $<TARGET_FILE:test_dist_device> --device cuda
             --steps 20)
    set_tests_properties(test_dist_device_cuda_np2 PROPERTIES LABELS "cuda;dist" TIMEOUT 600 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${REMAT_DIST_ENV}")
  endif()

  add_test(NAME test_dist_abort
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|2|$<TARGET_FILE:test_dist>|--abort" -DLIMIT=30
            "-DPATTERN=rank 1 fails alone at step 2 and ends the job" -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)

  add_test(NAME cli_dist_same
    COMMAND ${CMAKE_COMMAND} -DCLI=${CLI} "-DMPI=${REMAT_MPIRUN_BAR}" -DDIR=${CMAKE_CURRENT_BINARY_DIR}/dist_same
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_same.cmake)
  # the same in bf16 (its budget between bf16's floor and what all holds)
  add_test(NAME cli_dist_same_bf16
    COMMAND ${CMAKE_COMMAND} -DCLI=${CLI} "-DMPI=${REMAT_MPIRUN_BAR}" -DDIR=${CMAKE_CURRENT_BINARY_DIR}/dist_same_bf16
            "-DEXTRA=--precision|bf16" -DBUDGET=42MiB -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_same.cmake)

  # one rank without its data, one with a bad flag (two programs on one
  # job, mpirun's MPMD form): every rank stops, naming rank 1 and why
  set(train1 ${CLI}|train|--model|cnn|--steps|3|--threads|1)
  add_test(NAME cli_dist_bad_data
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|1|${train1}|:|-np|1|${train1}|--data-dir|/nonexistent/fmnist"
            -DLIMIT=30 "-DPATTERN=rank 0 of 2 stops: rank 1 of 2 \\([^)]+\\): fashion-mnist: [^\n]*/nonexistent/fmnist"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)
  add_test(NAME cli_dist_bad_flag
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|1|${train1}|:|-np|1|${train1}|--micro-batch|0"
            -DLIMIT=30 "-DPATTERN=rank 0 of 2 stops: rank 1 of 2 \\([^)]+\\): remat train: bad value '0' for --micro-batch"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)
  # ranks given different flags that define the math or the run's course
  # (issue 22): every rank stops at start-up, naming the flag, the ranks
  # and their values, instead of training wrong weights or hanging
  add_test(NAME cli_dist_same_seed
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|1|${train1}|--seed|1|:|-np|1|${train1}|--seed|2"
            -DLIMIT=30 "-DPATTERN=remat: the ranks disagree on --seed: rank 0 has '1'; rank 1 has '2'"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)
  add_test(NAME cli_dist_same_lr
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|1|${train1}|--lr|0.01|:|-np|1|${train1}|--lr|0.02"
            -DLIMIT=30 "-DPATTERN=remat: the ranks disagree on --lr: rank 0 has '0.01'; rank 1 has '0.02'"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)
  add_test(NAME cli_dist_same_steps
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|1|${train1}|:|-np|1|${train1}|--steps|4"
            -DLIMIT=30 "-DPATTERN=remat: the ranks disagree on --steps: rank 0 has '3'; rank 1 has '4'"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)
  add_test(NAME cli_dist_same_save_every
    COMMAND ${CMAKE_COMMAND}
            "-DCMD=${REMAT_MPIRUN_BAR}|1|${train1}|--state-dir|${CMAKE_CURRENT_BINARY_DIR}/dist_same_save|--save-every|1|:|-np|1|${train1}|--state-dir|${CMAKE_CURRENT_BINARY_DIR}/dist_same_save"
            -DLIMIT=30 "-DPATTERN=remat: the ranks disagree on --save-every: rank 0 has '1'; rank 1 has '\\(not given\\)'"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)
  # SIGTERM to mpirun or to one rank at 10 moments: every rank stops after
  # the same step, rank 0 saves it, the resumed run ends bitwise the same
  add_test(NAME test_guard_stop_mpi COMMAND test_guard --stop-mpi ${REMAT_DIST_QUICK} $<TARGET_FILE:remat-cli> ${REMAT_MPIRUN}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(cli_dist_same_seed cli_dist_same_lr cli_dist_same_steps cli_dist_same_save_every
                       test_guard_stop_mpi PROPERTIES LABELS dist TIMEOUT 300 ENVIRONMENT "${REMAT_DIST_ENV}")

  add_test(NAME cli_dist_budget
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|2|${train1}|--budget|8MiB" -DLIMIT=30
            "-DPATTERN=rank 0 of 2 \\([^)]+\\): no schedule fits the budget of 8388608 bytes \\(8\\.0 MiB\\); the smallest feasible budget is [0-9]+ bytes[^\n]*\nremat: rank 0 of 2 \\([^)]+\\): no schedule fits"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)
  add_test(NAME cli_dist_uneven
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|2|${train1}|--batch|48|--micro-batch|16" -DLIMIT=30
            "-DPATTERN=remat train: --batch 48 is not a multiple of --micro-batch 16 x 2 ranks"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/dist_fail.cmake)
  add_test(NAME cli_dist_bench
    COMMAND ${CMAKE_COMMAND} "-DCMD=${REMAT_MPIRUN_BAR}|2|${CLI}|bench|--model|mlp|--batch|16|--steps|2|--warmup|1|--threads|1|--strategies|all|--json"
            -DRC=0 "-DPATTERN=^\\{\"model\":\"mlp\",\"batch\":16,\"micro_batch\":8,\"strategy\":\"all\",\"ranks\":2,.*\"measured_peak_bytes\":[1-9][0-9]*,.*\"comm_bytes\":[1-9][0-9]*,.*\"wait_seconds\":[0-9.e-]+,"
            -P ${CMAKE_CURRENT_SOURCE_DIR}/expect.cmake)
  set_tests_properties(test_dist_abort cli_dist_same cli_dist_same_bf16 cli_dist_bad_data cli_dist_bad_flag cli_dist_budget
                       cli_dist_uneven cli_dist_bench
                       PROPERTIES LABELS dist TIMEOUT 600 ENVIRONMENT "${REMAT_DIST_ENV}")
endif()
