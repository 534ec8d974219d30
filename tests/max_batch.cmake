# remat plan --max-batch (included from tests/CMakeLists.txt, which sets
# CLI): each answer checked against plans of that batch and the batches
# above it (max_batch_check.cmake), on cnn and a tiny resnet18, at budgets
# where store-all, optimal and optimal within the overhead limit give three
# different batches (resnet18: 34, 58 and 49 today); then the combinations
# that make no sense.
set(MAX_BATCH_CHECK ${CMAKE_CURRENT_SOURCE_DIR}/max_batch_check.cmake)
add_test(NAME cli_max_batch_cnn
         COMMAND ${CMAKE_COMMAND} -DCLI=${CLI} "-DARGS=--model cnn" -DBUDGET=40MiB -DOVERHEAD=0.1
                 -P ${MAX_BATCH_CHECK})
add_test(NAME cli_max_batch_resnet18
         COMMAND ${CMAKE_COMMAND} -DCLI=${CLI}
                 "-DARGS=--model resnet18 --image 3x32x32 --classes 10 --base-channels 8"
                 -DBUDGET=5MiB -DOVERHEAD=10 -P ${MAX_BATCH_CHECK})
# the same search as cli_max_batch_cnn on a larger graph: minutes under the
# sanitizers, which cli_max_batch_cnn runs through the same code
if(REMAT_SANITIZE)
  set_tests_properties(cli_max_batch_resnet18 PROPERTIES DISABLED ON)
endif()
remat_expect(NAME cli_max_batch_text RC 0
             PATTERN "store-all \\(all\\) +batch +[0-9]+ .*recomputation \\(optimal\\) +batch +[0-9]+ .*extra <= 30% +batch +[0-9]+"
             COMMAND ${CLI} plan --model mlp --budget 16MiB --max-batch)
remat_expect(NAME cli_max_batch_needs_budget RC 2 PATTERN "remat plan: --max-batch needs --budget\n"
             COMMAND ${CLI} plan --model cnn --max-batch)
remat_expect(NAME cli_max_batch_not_sweep RC 2 PATTERN "remat plan: --max-batch plans a model's step at many batches: not with --sweep\n"
             COMMAND ${CLI} plan --model cnn --max-batch --budget 64MiB --sweep)
remat_expect(NAME cli_max_batch_not_chain RC 2 PATTERN "remat plan: --max-batch plans a model's step at many batches: not with --chain\n"
             COMMAND ${CLI} plan --chain ${CMAKE_CURRENT_SOURCE_DIR}/chains/u1.json --max-batch --budget 9)
remat_expect(NAME cli_max_batch_not_strategy RC 2 PATTERN "remat plan: --max-batch plans with all and optimal itself: drop --strategy\n"
             COMMAND ${CLI} plan --model cnn --max-batch --budget 64MiB --strategy all)
remat_expect(NAME cli_max_overhead_alone RC 2 PATTERN "remat plan: --max-overhead needs --max-batch\n"
             COMMAND ${CLI} plan --model cnn --budget 64MiB --max-overhead 10)
