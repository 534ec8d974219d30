# The vector kernels end to end: gpt2 (2 layers, 128 wide) trained 3 AdamW steps with
# dropout, GELU, softmax and the loss, in fp32 and in bf16, saves the same
# weights, byte for byte, on the plain scalar kernels and on the highest
# vector level this CPU has (REMAT_PW16 caps the level; an unknown or
# unavailable cap falls back to what the CPU has, so every run is valid on
# any machine, and on one without vectors all four are scalar).
foreach(prec fp32 bf16)
  foreach(level scalar avx512bf16)
    set(out ${WORK}/levels_${prec}_${level}.safetensors)
    file(REMOVE ${out})
    execute_process(
      COMMAND ${CMAKE_COMMAND} -E env REMAT_PW16=${level}
              ${CLI} train --model gpt2 --layers 2 --embd 128 --heads 4 --vocab 512 --context 64 --batch 4
              --data synthetic --steps 3 --precision ${prec}
              --threads 2 --save ${out}
      OUTPUT_QUIET ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "remat train --precision ${prec} (REMAT_PW16=${level}) failed (${rc}): ${err}")
    endif()
    file(SHA256 ${out} sum_${level})
  endforeach()
  if(NOT sum_scalar STREQUAL sum_avx512bf16)
    message(FATAL_ERROR "${prec}: the weights after 3 steps differ between the scalar kernels and the vector ones")
  endif()
  message(STATUS "${prec}: the same weights after 3 steps on the scalar and the vector kernels (${sum_scalar})")
endforeach()
