# dist_same.cmake: `remat train` gives the same weights, file for file, on
# 1, 2 and 4 ranks under three plans, and a run that resumes on another
# number of ranks ends where the uninterrupted one does.
#
#   cmake -DCLI=remat -DMPI=mpiexec|--oversubscribe|-np -DDIR=dir [-DEXTRA=--precision|bf16 -DBUDGET=44MiB]
#         -P dist_same.cmake
#
# MPI is the launcher and its flags up to the rank count ("|"-separated);
# EXTRA, flags every run gets ("|"-separated); BUDGET, the 4-rank run's
# (default 36MiB).
string(REPLACE "|" ";" mpi "${MPI}")
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
string(REPLACE "|" ";" extra "${EXTRA}")
if(NOT DEFINED BUDGET)
  set(BUDGET 36MiB)
endif()
set(common --model cnn --batch 64 --micro-batch 16 --threads 1 --optim sgd --lr 0.05 --seed 3
           --test-limit 100 ${extra})

# run(name ranks args...): ranks 0 runs without a launcher
function(run name ranks)
  if(ranks EQUAL 0)
    set(cmd ${CLI})
  else()
    set(cmd ${mpi} ${ranks} ${CLI})
  endif()
  execute_process(COMMAND ${cmd} train ${common} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 300)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " shown "${cmd} train ${common} ${ARGN}")
    message(FATAL_ERROR "${name}: ${shown}\nexited with ${rc}:\n${out}${err}")
  endif()
  set(out_${name} "${out}" PARENT_SCOPE)
  message(STATUS "${name}: ${out}")
endfunction()

run(one 0 --steps 10 --save ${DIR}/one.safetensors)
run(two 2 --steps 10 --strategy sqrt --save ${DIR}/two.safetensors)
run(four 4 --steps 10 --budget ${BUDGET} --save ${DIR}/four.safetensors)
# 5 steps on 2 ranks, then 5 more on 1, and on 4
run(first 2 --steps 5 --state-dir ${DIR}/states)
run(resumed1 0 --steps 10 --resume ${DIR}/states --state-dir ${DIR}/states1 --save ${DIR}/resumed1.safetensors)
run(resumed4 4 --steps 10 --resume ${DIR}/states --state-dir ${DIR}/states4 --save ${DIR}/resumed4.safetensors)

if(NOT out_two MATCHES "^2 ranks on 1 host \\(mpi; rank 0 on [^)]+\\), 1 thread per rank\n")
  message(FATAL_ERROR "the first line of a 2-rank run does not name the ranks, hosts and threads:\n${out_two}")
endif()
if(NOT out_four MATCHES "batch 64 \\(4 micro-batches of 16, 1 per rank\\)")
  message(FATAL_ERROR "a 4-rank run does not say how the batch is split:\n${out_four}")
endif()
if(NOT out_resumed4 MATCHES "resumed from [^\n]*state-000000000005\\.safetensors: step 5")
  message(FATAL_ERROR "the 4-rank run did not resume from step 5:\n${out_resumed4}")
endif()
foreach(f two four resumed1 resumed4)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DIR}/one.safetensors ${DIR}/${f}.safetensors
                  RESULT_VARIABLE same)
  if(NOT same EQUAL 0)
    message(FATAL_ERROR "${f}.safetensors differs from one.safetensors: the weights depend on the ranks or the plan")
  endif()
endforeach()
string(REGEX MATCH "test accuracy [0-9.]+%" acc "${out_one}")
message(STATUS "1, 2 and 4 ranks, all, sqrt and optimal, and resumes on 1 and 4 ranks from a 2-rank state: "
        "the same weights, bit for bit (${acc})")
