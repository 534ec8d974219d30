# Trains cnn briefly on real Fashion-MNIST and checks the test accuracy
# reported in the JSON output against FLOOR.
execute_process(
  COMMAND ${CLI} train --model cnn --data fashion-mnist --epochs 1 --train-limit 6000
          --test-limit 2000 --batch 64 --optim adamw --lr 0.001 --seed 1 --json
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "remat train failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "\"test_accuracy\":[0-9.]+" accs "${out}")
list(GET accs -1 last)
string(REGEX REPLACE ".*:" "" acc "${last}")
message(STATUS "test accuracy ${acc} (floor ${FLOOR})")
if(acc LESS FLOOR)
  message(FATAL_ERROR "test accuracy ${acc} is below ${FLOOR}")
endif()
string(REGEX MATCHALL "\"event\":\"step\"" steps "${out}")
list(LENGTH steps n)
if(NOT n EQUAL 93)
  message(FATAL_ERROR "expected 93 step records, got ${n}")
endif()
