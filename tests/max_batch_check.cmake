# max_batch_check.cmake: checks `remat plan --max-batch --json` against
# plans of single batches. For each of its three answers (store_all,
# optimal, within_overhead) the answer must qualify and each of the
# `checked_above` batches after it must not, as `remat plan --batch b
# --strategy all|optimal --budget BUDGET` says: exit 0 (fits, holding what
# --max-batch reported) or exit 1 with the planner's budget message (does
# not fit); within_overhead also needs the plan's extra FLOPs within the
# limit. Costs are FLOPs (the cached calibration is kept out), so the
# limit is compared with the plan's extra_flops_percent.
#
#   cmake -DCLI=remat "-DARGS=--model cnn" -DBUDGET=40MiB -DOVERHEAD=0.1 -P max_batch_check.cmake
foreach(v CLI ARGS BUDGET OVERHEAD)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "max_batch_check.cmake needs -D${v}=...")
  endif()
endforeach()
set(ENV{REMAT_COST_MODEL} "/nonexistent/remat-max-batch-test/cost-model.json")
separate_arguments(args UNIX_COMMAND "${ARGS}")

execute_process(COMMAND ${CLI} plan ${args} --budget ${BUDGET} --max-batch --max-overhead ${OVERHEAD} --json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "remat plan ${ARGS} --budget ${BUDGET} --max-batch failed (${rc}):\n${err}")
endif()
string(JSON unit GET "${out}" overhead_unit)
string(JSON above GET "${out}" checked_above)
string(JSON limit GET "${out}" max_overhead_percent)
if(NOT unit STREQUAL "flops")
  message(FATAL_ERROR "expected the overhead in FLOPs without a cost model, got '${unit}': ${out}")
endif()
if(NOT limit EQUAL OVERHEAD)
  message(FATAL_ERROR "max_overhead_percent is ${limit}, not the ${OVERHEAD} given")
endif()

# Plans one batch: sets fits (1/0), held and extra (when it fits) in the
# caller's scope; a failure that is not the budget's stops the test.
function(plan_batch strategy batch)
  execute_process(COMMAND ${CLI} plan ${args} --batch ${batch} --strategy ${strategy} --budget ${BUDGET} --json
                  OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE r)
  if(r EQUAL 0)
    string(JSON h GET "${o}" held_bytes)
    string(JSON x GET "${o}" extra_flops_percent)
    set(fits 1 PARENT_SCOPE)
    set(held ${h} PARENT_SCOPE)
    set(extra ${x} PARENT_SCOPE)
  elseif(r EQUAL 1 AND e MATCHES "budget")
    set(fits 0 PARENT_SCOPE)
  else()
    message(FATAL_ERROR "remat plan ${ARGS} --batch ${batch} --strategy ${strategy} --budget ${BUDGET} "
                        "failed (${r}) for a reason other than the budget:\n${e}")
  endif()
endfunction()

# Whether (strategy, batch) qualifies for an answer: sets ok.
function(qualifies key strategy batch)
  plan_batch(${strategy} ${batch})
  set(q ${fits})
  if(fits AND key STREQUAL "within_overhead" AND extra GREATER limit)
    set(q 0)
  endif()
  set(ok ${q} PARENT_SCOPE)
  set(fits ${fits} PARENT_SCOPE)
  set(held ${held} PARENT_SCOPE)
  set(extra ${extra} PARENT_SCOPE)
endfunction()

foreach(pair "store_all;all" "optimal;optimal" "within_overhead;optimal")
  list(GET pair 0 key)
  list(GET pair 1 strategy)
  string(JSON batch GET "${out}" ${key} batch)
  if(batch LESS 1)
    message(FATAL_ERROR "${key}: no batch fits ${BUDGET}; pick a budget where one does")
  endif()
  string(JSON want_held GET "${out}" ${key} held_bytes)
  string(JSON want_extra GET "${out}" ${key} extra_percent)
  qualifies(${key} ${strategy} ${batch})
  if(NOT ok)
    message(FATAL_ERROR "${key}: --max-batch says batch ${batch} qualifies with ${strategy} at ${BUDGET}, "
                        "but remat plan --batch ${batch} does not (fits: ${fits}; extra ${extra}%, limit ${limit}%)")
  endif()
  if(NOT held EQUAL want_held OR NOT extra EQUAL want_extra)
    message(FATAL_ERROR "${key}: batch ${batch} holds ${held} B with ${extra}% extra by remat plan, "
                        "${want_held} B with ${want_extra}% by --max-batch")
  endif()
  math(EXPR last "${batch} + ${above}")
  math(EXPR first "${batch} + 1")
  foreach(b RANGE ${first} ${last})
    qualifies(${key} ${strategy} ${b})
    if(ok)
      message(FATAL_ERROR "${key}: --max-batch says ${batch} is the largest batch (${strategy}, ${BUDGET}), "
                          "but batch ${b} qualifies too (holds ${held} B, ${extra}% extra)")
    endif()
  endforeach()
  message(STATUS "${key}: batch ${batch} qualifies (${want_held} B, ${want_extra}% extra), ${first}..${last} do not")
  set(answer_${key} ${batch})
endforeach()
if(answer_optimal LESS answer_store_all)
  message(FATAL_ERROR "optimal's batch ${answer_optimal} is below store-all's ${answer_store_all}")
endif()
