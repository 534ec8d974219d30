# hostile.cmake: input that would make remat work forever or learn garbage
# fails fast, with an exit status and a message that names the problem and
# the figure behind it (issue 9, item 7). The library's cases are
# test_hostile's; the command line's are here, each run by expect.cmake,
# which checks the exit status and the message both.

remat_test(test_hostile)
set_tests_properties(test_hostile PROPERTIES LABELS hostile TIMEOUT 120)

set(HOSTILE_DIR ${CMAKE_CURRENT_BINARY_DIR}/hostile)
file(MAKE_DIRECTORY ${HOSTILE_DIR})

# remat_expect is tests/CMakeLists.txt's; these carry the label hostile.

# 2147483647 gpt2 layers used to build a graph for ever: refused from the
# options, with the figures.
set(GPT2_HUGE "model 'gpt2' \\(batch 64, 2147483647 layers, embd 768, 12 heads, context 1024, vocab 50257\\) is too large: it would have about 55\\.8 billion nodes \\(limit 1 million\\), 25\\.8 billion parameter tensors")
remat_expect(NAME cli_hostile_gpt2_layers_info LABELS hostile RC 1 PATTERN "${GPT2_HUGE}"
             COMMAND ${CLI} info --model gpt2 --layers 2147483647)
remat_expect(NAME cli_hostile_gpt2_layers_plan LABELS hostile RC 1 PATTERN "${GPT2_HUGE}"
             COMMAND ${CLI} plan --model gpt2 --layers 2147483647 --budget 1GiB)
remat_expect(NAME cli_hostile_gpt2_layers_train LABELS hostile RC 1 PATTERN "${GPT2_HUGE}" NOT_PATTERN "step 1/"
             COMMAND ${CLI} train --model gpt2 --layers 2147483647 --data synthetic --steps 1)

# A 2000-stage chain would allocate a 9.4 GiB table and plan for 22
# minutes: refused before anything is allocated.
string(REPEAT "{\"forward\": 1, \"backward\": 2, \"input\": 4096, \"saved\": 8192}, " 1999 HOSTILE_STAGES)
file(WRITE ${HOSTILE_DIR}/chain2000.json
     "{\"stages\": [${HOSTILE_STAGES}{\"forward\": 1, \"backward\": 2, \"input\": 4096, \"saved\": 8192}], \"output\": 4096}\n")
remat_expect(NAME cli_hostile_chain_2000 LABELS hostile RC 1
             PATTERN "a chain of 2000 stages with 500 memory slots is too large to plan: planning would need 9\\.41 GiB of tables \\(limit 1 GiB\\) and about 6\\.8e\\+11 operations"
             COMMAND ${CLI} plan --chain ${HOSTILE_DIR}/chain2000.json --budget 1000000)

# Numbers beyond float's range, and NaN, are refused, not narrowed.
remat_expect(NAME cli_hostile_momentum LABELS hostile RC 2 PATTERN "bad value '1e39' for --momentum: out of float range"
             COMMAND ${CLI} train --model mlp --data synthetic --optim sgd --momentum 1e39)
remat_expect(NAME cli_hostile_lr_nan LABELS hostile RC 2 PATTERN "bad value 'nan' for --lr: not a finite number"
             COMMAND ${CLI} train --model mlp --data synthetic --lr nan)

# --save where nothing can be saved fails before the first step (tests run
# as root here, to whom access() says everything is writable: a
# directory, a missing folder, /proc and a device).
set(SAVE_ARGS train --model mlp --data synthetic --batch 4 --steps 1 --threads 1)
remat_expect(NAME cli_hostile_save_dir LABELS hostile RC 1 NOT_PATTERN "step 1/1"
             PATTERN "cannot save the weights to [^ ]*/hostile: it is a directory"
             COMMAND ${CLI} ${SAVE_ARGS} --save ${HOSTILE_DIR})
remat_expect(NAME cli_hostile_save_no_folder LABELS hostile RC 1 NOT_PATTERN "step 1/1"
             PATTERN "cannot save the weights to /nonexistent-remat/w\\.safetensors: its folder /nonexistent-remat does not exist"
             COMMAND ${CLI} ${SAVE_ARGS} --save /nonexistent-remat/w.safetensors)
remat_expect(NAME cli_hostile_save_proc LABELS hostile RC 1 NOT_PATTERN "step 1/1"
             PATTERN "cannot save the weights to /proc/remat-hostile\\.safetensors: cannot create a file in its folder /proc: "
             COMMAND ${CLI} ${SAVE_ARGS} --save /proc/remat-hostile.safetensors)
remat_expect(NAME cli_hostile_save_device LABELS hostile RC 1 NOT_PATTERN "step 1/1"
             PATTERN "cannot save the weights to /dev/null: it is not a regular file"
             COMMAND ${CLI} ${SAVE_ARGS} --save /dev/null)

# Weights with an infinity (fc1.weight element 3, written by test_hostile):
# training stops before its first step and saves nothing; remat grad
# writes no gradients.
add_test(NAME cli_hostile_inf_weights_file COMMAND test_hostile --write-inf-weights ${HOSTILE_DIR}/inf.safetensors)
set_tests_properties(cli_hostile_inf_weights_file PROPERTIES LABELS hostile FIXTURES_SETUP hostile_inf)
remat_expect(NAME cli_hostile_inf_weights_train LABELS hostile RC 1 NOT_PATTERN "saved weights"
             PATTERN "cannot train from these weights: parameter 'fc1\\.weight' \\(index 0 of 6\\) is not finite: element 3 of 200704 is \\+inf"
             COMMAND ${CLI} ${SAVE_ARGS} --init-from ${HOSTILE_DIR}/inf.safetensors --save ${HOSTILE_DIR}/never.safetensors)
remat_expect(NAME cli_hostile_inf_weights_grad LABELS hostile RC 1 NOT_PATTERN "wrote loss"
             PATTERN "not writing [^ ]*/never-grads\\.safetensors: the loss is NaN"
             COMMAND ${CLI} grad --model mlp --batch 8 --threads 1 --init-from ${HOSTILE_DIR}/inf.safetensors
                     --batch-from ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/mlp.safetensors --out ${HOSTILE_DIR}/never-grads.safetensors)
set_tests_properties(cli_hostile_inf_weights_train cli_hostile_inf_weights_grad PROPERTIES FIXTURES_REQUIRED hostile_inf)
