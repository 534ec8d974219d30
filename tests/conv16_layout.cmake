# conv16_layout.cmake: the bf16 convolutions' layout on a GPU
# (REMAT_CUDA_CONV16, docs/gpu.md) in the plan: channels-last copies are
# workspace, so a plan with nhwc holds more workspace than one with nchw
# (the default, the same as unset), and any other value is refused,
# naming the variable. Runs with or without a GPU here (without one the
# convolutions' cuDNN workspace is the same estimate either way, so the
# difference is the copies alone).
#
#   cmake -DCLI=path/to/remat -P conv16_layout.cmake
set(args plan --model resnet18 --batch 8 --device cuda --precision bf16 --budget 8GiB)
foreach(layout unset nchw nhwc)
  if(layout STREQUAL "unset")
    set(envs --unset=REMAT_CUDA_CONV16)
  else()
    set(envs REMAT_CUDA_CONV16=${layout})
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${envs} ${CLI} ${args}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 110)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "\n  workspace +([0-9]+) B")
    message(FATAL_ERROR "remat ${args} with ${envs} exited with '${rc}':\n${out}${err}")
  endif()
  set(ws_${layout} ${CMAKE_MATCH_1})
  message(STATUS "${layout}: workspace ${CMAKE_MATCH_1} B")
endforeach()
if(NOT ws_unset EQUAL ws_nchw)
  message(FATAL_ERROR "unset and nchw plan different workspaces: ${ws_unset} B and ${ws_nchw} B")
endif()
if(NOT ws_nhwc GREATER ws_nchw)
  message(FATAL_ERROR "nhwc's workspace (${ws_nhwc} B) is not above nchw's (${ws_nchw} B): the copies are not planned")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env REMAT_CUDA_CONV16=nchw32 ${CLI} ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 110)
if(NOT rc EQUAL 1 OR NOT err MATCHES "REMAT_CUDA_CONV16 is 'nchw32': it takes nchw \\(the default\\) or nhwc")
  message(FATAL_ERROR "REMAT_CUDA_CONV16=nchw32 exited with '${rc}', not refused by name:\n${out}${err}")
endif()
