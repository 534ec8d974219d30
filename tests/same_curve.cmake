# The trap that started this project, end to end: training cnn on real
# Fashion-MNIST with its first block checkpointed (its input is the data
# batch) gives the same loss curve, bitwise (9 significant digits identify
# a float exactly), and the same test accuracy as training without.
foreach(run all manual)
  execute_process(
    COMMAND ${CLI} train --model cnn --data fashion-mnist --epochs 1 --train-limit 1280
            --test-limit 500 --batch 64 --seed 3 --strategy ${run} --checkpoint-blocks 1 --json
    OUTPUT_VARIABLE out_${run} ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "remat train --strategy ${run} failed (${rc}): ${err}")
  endif()
  string(REGEX MATCHALL "\"loss\":[^,]+" loss_${run} "${out_${run}}")
  string(REGEX MATCHALL "\"test_accuracy\":[^,]+" acc_${run} "${out_${run}}")
endforeach()
list(LENGTH loss_all n)
if(NOT n EQUAL 20)
  message(FATAL_ERROR "expected 20 steps, got ${n}")
endif()
if(NOT "${loss_all}" STREQUAL "${loss_manual}")
  message(FATAL_ERROR "loss curves differ:\nall:    ${loss_all}\nmanual: ${loss_manual}")
endif()
if(NOT "${acc_all}" STREQUAL "${acc_manual}")
  message(FATAL_ERROR "test accuracy differs: ${acc_all} vs ${acc_manual}")
endif()
message(STATUS "20 losses and the test accuracy are identical: ${acc_all}")
