# exports.cmake: libremat.so exports the public API and nothing else.
#
#   cmake -DLIB=libremat.so -DHEADER=include/remat.h -DNM=nm -P exports.cmake
#
# The public names are the functions include/remat.h declares with
# REMAT_API. Every symbol `nm -D --defined-only` lists must be one of them
# (an internal remat__ name, a static archive's symbol or a stray global is
# a failure), and each of them must be exported (a REMAT_API declaration
# with no definition behind it is one too). The linker's own markers
# (_init, _fini, _edata, _end, __bss_start) are allowed.

foreach(v LIB HEADER NM)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "exports.cmake: -D${v}=... is required")
  endif()
endforeach()

file(STRINGS ${HEADER} decls REGEX "^REMAT_API ")
set(public "")
foreach(d IN LISTS decls)
  if(d MATCHES "(remat_[a-z0-9_]+)\\(")
    list(APPEND public ${CMAKE_MATCH_1})
  endif()
endforeach()
list(LENGTH public npublic)
if(npublic LESS 10)
  message(FATAL_ERROR "exports.cmake: only ${npublic} REMAT_API declarations read from ${HEADER}")
endif()

execute_process(COMMAND ${NM} -D --defined-only ${LIB}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exports.cmake: ${NM} -D --defined-only ${LIB} failed (${rc}): ${err}")
endif()
string(REPLACE "\n" ";" lines "${out}")

set(allowed _init _fini _edata _end __bss_start)
set(exported "")
set(stray "")
foreach(l IN LISTS lines)
  if(l STREQUAL "")
    continue()
  endif()
  # "address type name[@version]"
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] +" "" name "${l}")
  string(REGEX REPLACE "@.*$" "" name "${name}")
  list(FIND public ${name} i)
  list(FIND allowed ${name} j)
  if(i GREATER -1)
    list(APPEND exported ${name})
  elseif(j EQUAL -1)
    list(APPEND stray ${name})
  endif()
endforeach()

set(missing "")
foreach(p IN LISTS public)
  list(FIND exported ${p} i)
  if(i EQUAL -1)
    list(APPEND missing ${p})
  endif()
endforeach()

list(LENGTH exported nexported)
list(LENGTH stray nstray)
list(LENGTH missing nmissing)
if(nstray GREATER 0 OR nmissing GREATER 0)
  list(JOIN stray "\n  " s)
  list(JOIN missing "\n  " m)
  message(FATAL_ERROR "exports: ${LIB} exports ${nstray} name(s) that are not REMAT_API in ${HEADER}:\n  ${s}\n"
    "and lacks ${nmissing} REMAT_API name(s):\n  ${m}")
endif()
message(STATUS "exports: ${nexported} symbols, all REMAT_API (${npublic} declared)")
