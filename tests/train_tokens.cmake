# remat train on a token file. A tiny GPT-2 trained on a file that repeats
# a 20-token pattern must bring its loss from about ln(384) = 5.95 to below
# 1; saved and reloaded with --init-from it must start low; a model of
# another shape, a vocabulary too small for the file and a file of an odd
# size are refused with messages naming the tensor, the position, the size.
# The file is written here with ids 257..383 (low byte 1..127, high byte
# 1), because CMake strings cannot hold a NUL byte.
# Usage: cmake -DCLI=path/to/remat -DDIR=scratch -P train_tokens.cmake
set(pattern 3 14 15 9 26 5 35 8 9 7 9 32 38 4 6 26 43 38 32 7)
string(ASCII 1 high)
set(text "")
foreach(rep RANGE 99)
  foreach(lo ${pattern})
    string(ASCII ${lo} c)
    string(APPEND text "${c}${high}")
  endforeach()
endforeach()
file(MAKE_DIRECTORY ${DIR})
set(tokens ${DIR}/pattern.tok)
file(WRITE ${tokens} "${text}")
file(SIZE ${tokens} size)
if(NOT size EQUAL 4000)
  message(FATAL_ERROR "token file has ${size} bytes, expected 4000")
endif()
execute_process(
  COMMAND ${CLI} train --model gpt2 --layers 2 --embd 32 --heads 2 --context 16 --vocab 384
          --batch 4 --data tokens:${tokens} --steps 150 --lr 3e-3 --dropout-scale 0 --threads 1
          --seed 7 --json --save ${DIR}/gpt2-tiny.safetensors
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "remat train failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "\"loss\":[0-9.e+-]+" losses "${out}")
list(LENGTH losses n)
if(NOT n EQUAL 150)
  message(FATAL_ERROR "expected 150 step lines, got ${n}:\n${out}")
endif()
list(GET losses 0 first)
list(GET losses -1 last)
string(REPLACE "\"loss\":" "" first "${first}")
string(REPLACE "\"loss\":" "" last "${last}")
if(NOT out MATCHES "\"step_seconds\":[0-9.]+" OR NOT out MATCHES "\"tokens_per_s\":")
  message(FATAL_ERROR "step lines lack step_seconds or tokens_per_s:\n${out}")
endif()
message(STATUS "gpt2 tiny on a repeating token file: loss ${first} -> ${last}")
if(first LESS 5.0 OR first GREATER 7.0 OR NOT last LESS 1.0)
  message(FATAL_ERROR "the loss should fall from about 5.95 to below 1: ${first} -> ${last}")
endif()
if(NOT EXISTS ${DIR}/gpt2-tiny.safetensors)
  message(FATAL_ERROR "--save wrote nothing")
endif()

# Resuming from the saved weights: the first loss is already low.
set(tiny --model gpt2 --layers 2 --embd 32 --heads 2 --context 16 --vocab 384 --batch 4
         --dropout-scale 0 --threads 1 --json)
execute_process(
  COMMAND ${CLI} train ${tiny} --data tokens:${tokens} --steps 1 --init-from ${DIR}/gpt2-tiny.safetensors
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCH "\"loss\":([0-9.e+-]+)" m "${out}")
if(NOT rc EQUAL 0 OR NOT CMAKE_MATCH_1 LESS 1.0)
  message(FATAL_ERROR "--init-from the trained weights should start below 1 (rc ${rc}): ${out}${err}")
endif()

# Errors: each names what is wrong.
function(expect_error what regex)
  execute_process(COMMAND ${CLI} train ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT err MATCHES "${regex}")
    message(FATAL_ERROR "${what}: expected an error matching '${regex}', got (rc ${rc}):\n${out}${err}")
  endif()
endfunction()
expect_error("weights of another model" "gpt2-tiny.safetensors: tensor 'transformer.h.1[.a-z_0-9]*' is not a parameter"
  --model gpt2 --layers 1 --embd 32 --heads 2 --context 16 --vocab 384 --batch 4 --steps 1
  --data tokens:${tokens} --init-from ${DIR}/gpt2-tiny.safetensors)
expect_error("ids beyond the vocabulary" "pattern.tok: token 282 at position 4 .* vocabulary of 280"
  --model gpt2 --layers 1 --embd 16 --heads 2 --context 8 --vocab 280 --batch 2 --steps 1 --data tokens:${tokens})
file(WRITE ${DIR}/odd.tok "abc")
expect_error("odd byte count" "odd.tok: 3 bytes, an odd count"
  --model gpt2 --layers 1 --embd 16 --heads 2 --context 8 --vocab 384 --batch 2 --data tokens:${DIR}/odd.tok)
expect_error("missing file" "nosuch.tok: no such token file"
  --model gpt2 --layers 1 --embd 16 --heads 2 --context 8 --vocab 384 --batch 2 --data tokens:${DIR}/nosuch.tok)
expect_error("tokens for a classifier" "tokens:FILE is for language models"
  --model cnn --data tokens:${tokens})
