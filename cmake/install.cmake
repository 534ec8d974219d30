# Installation: the header, the shared library (libremat.so.1) and the
# static one (libremat.a), the `remat` program, pkg-config files and a CMake
# package, so that a C program links remat either way after
# `cmake --install BUILD --prefix P`:
#
#   cc app.c $(pkg-config --cflags --libs remat)          # shared
#   cc app.c $(pkg-config --cflags --libs remat-static)   # static
#   find_package(remat) + target_link_libraries(app remat::remat)         # shared
#                       + target_link_libraries(app remat::remat_static)  # static
#
# The static library needs everything the library itself links against:
# OpenBLAS, cJSON, zlib, threads and libm, and, when they are built in,
# oneDNN with OpenMP's runtime (Debian ships no dnnl.pc), MPI and CUDA's libraries with the C++ runtime (nvcc's objects and
# cudart_static need it). REMAT_PC_LIBS_PRIVATE collects them as linker
# flags for pkg-config; the CMake package names the same as imported
# targets (rematConfig.cmake finds them again on the user's side).
# tests/install_test.cmake checks all four ways from a temporary prefix.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# A full library path -> "-L<dir> -l<name>" (pkg-config wants flags).
function(remat_path_to_flags out)
  set(flags)
  foreach(lib IN LISTS ARGN)
    if(IS_ABSOLUTE "${lib}")
      get_filename_component(dir "${lib}" DIRECTORY)
      get_filename_component(name "${lib}" NAME_WE)
      string(REGEX REPLACE "^lib" "" name "${name}")
      list(APPEND flags "-L${dir}" "-l${name}")
    elseif(lib MATCHES "^-")
      list(APPEND flags "${lib}")
    else()
      list(APPEND flags "-l${lib}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  string(REPLACE ";" " " flags "${flags}")
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

set(REMAT_PC_LIBS_PRIVATE "")
if(REMAT_DNNL)
  remat_path_to_flags(dnnl_flags ${DNNL_LIBRARY})
  string(APPEND REMAT_PC_LIBS_PRIVATE " ${dnnl_flags}")
  if(dnnl_runtime MATCHES "OMP")
    string(APPEND REMAT_PC_LIBS_PRIVATE " ${OpenMP_C_FLAGS}")
  endif()
endif()
if(REMAT_MPI)
  remat_path_to_flags(mpi_flags ${MPI_C_LIBRARIES})
  string(APPEND REMAT_PC_LIBS_PRIVATE " ${mpi_flags}")
endif()
if(REMAT_CUDA)
  get_filename_component(cudnn_dir "${CUDNN_LIBRARY}" DIRECTORY)
  set(cuda_dirs "-L${CUDAToolkit_LIBRARY_DIR}")
  if(NOT cudnn_dir STREQUAL CUDAToolkit_LIBRARY_DIR)
    string(APPEND cuda_dirs " -L${cudnn_dir}")
  endif()
  string(APPEND REMAT_PC_LIBS_PRIVATE " ${cuda_dirs} -lcublas -lcudnn -lcudart_static -lstdc++ -ldl -lrt")
endif()
string(APPEND REMAT_PC_LIBS_PRIVATE " -lpthread -lm")
string(STRIP "${REMAT_PC_LIBS_PRIVATE}" REMAT_PC_LIBS_PRIVATE)
set(REMAT_PC_REQUIRES_PRIVATE "openblas libcjson zlib")

install(TARGETS remat remat_shared EXPORT rematTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS remat-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# pkg-config: the files say the prefix given at install time
# (`cmake --install BUILD --prefix P`), not the one configured: they are
# written by the install step from templates made here.
set(REMAT_INSTALL_PREFIX "@REMAT_INSTALL_PREFIX@") # filled in by the install step
foreach(pc remat remat-static)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc.in @ONLY)
endforeach()
install(CODE "
  foreach(pc remat remat-static)
    set(REMAT_INSTALL_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
    configure_file(\"${CMAKE_CURRENT_BINARY_DIR}/\${pc}.pc.in\"
                   \"${CMAKE_CURRENT_BINARY_DIR}/install-pc/\${pc}.pc\" @ONLY)
  endforeach()")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/install-pc/remat.pc ${CMAKE_CURRENT_BINARY_DIR}/install-pc/remat-static.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The CMake package: remat::remat (shared) and remat::remat_static.
set_target_properties(remat_shared PROPERTIES EXPORT_NAME remat)
set_target_properties(remat PROPERTIES EXPORT_NAME remat_static)
set(REMAT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/remat)
install(EXPORT rematTargets NAMESPACE remat:: DESTINATION ${REMAT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rematConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/rematConfig.cmake INSTALL_DESTINATION ${REMAT_CMAKE_DIR})
# remat.h's ABI promise: what builds against X.Y builds against any X.Z, Z >= Y
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/rematConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/rematConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/rematConfigVersion.cmake
  DESTINATION ${REMAT_CMAKE_DIR})
