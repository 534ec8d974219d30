# remat bench --save-init writes the weights every row starts from: the
# seed's initialization. remat grad from that file and remat grad from the
# same seed must then write identical bytes.
# Usage: cmake -DCLI=path/to/remat -DDIR=scratch -DX=batch.safetensors -P bench_init.cmake
file(MAKE_DIRECTORY ${DIR})
set(model --model mlp --batch 8 --threads 1)
execute_process(COMMAND ${CLI} bench ${model} --steps 1 --warmup 0 --strategies all --seed 5
                        --save-init ${DIR}/init.safetensors --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT EXISTS ${DIR}/init.safetensors)
  message(FATAL_ERROR "remat bench --save-init failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${CLI} grad ${model} --batch-from ${X} --init-from ${DIR}/init.safetensors
                        --out ${DIR}/g-file.safetensors RESULT_VARIABLE rc1 ERROR_VARIABLE err1)
execute_process(COMMAND ${CLI} grad ${model} --batch-from ${X} --seed 5
                        --out ${DIR}/g-seed.safetensors RESULT_VARIABLE rc2 ERROR_VARIABLE err2)
execute_process(COMMAND ${CLI} grad ${model} --batch-from ${X} --seed 6
                        --out ${DIR}/g-other.safetensors RESULT_VARIABLE rc3 ERROR_VARIABLE err3)
if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0 OR NOT rc3 EQUAL 0)
  message(FATAL_ERROR "remat grad failed: ${err1}${err2}${err3}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/g-file.safetensors ${DIR}/g-seed.safetensors
                RESULT_VARIABLE same)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/g-file.safetensors ${DIR}/g-other.safetensors
                RESULT_VARIABLE other)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "gradients from --save-init's file differ from those of the same seed")
endif()
if(other EQUAL 0)
  message(FATAL_ERROR "another seed gave the same gradients: the comparison proves nothing")
endif()
