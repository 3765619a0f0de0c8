# Kokkos 4.5 and 4.6 (and develop before July 2025) built by GCC 12.2-12.5 leave a
# default-constructed View's allocation tracker zeroed instead of "unmanaged": GCC
# miscompiles its constexpr default constructor (kokkos/kokkos#7464 and #8187, fixed in
# Kokkos 4.7 by #8223). Every program then crashes the first time such a View is
# destroyed, which in Tessera is the first forward pass. Build and run a program that does
# only that, so the user hears it here, with the way out, and not from a segfault.
# Skipped where the program cannot run on this machine: a cross build, or a Kokkos with its
# CUDA backend (its programs need the CUDA driver, and nvcc's host code path differs).
set(_tessera_view_key "${Kokkos_DIR};${CMAKE_CXX_COMPILER};${CMAKE_CXX_COMPILER_VERSION}")
if(Kokkos_ENABLE_CUDA OR CMAKE_CROSSCOMPILING OR "${TESSERA_KOKKOS_DEFAULT_VIEW_OK}" STREQUAL "${_tessera_view_key}")
  return()
endif()
try_run(_tessera_view_run _tessera_view_compiles "${CMAKE_BINARY_DIR}/CMakeFiles/tessera_kokkos_check"
        "${CMAKE_CURRENT_LIST_DIR}/kokkos_default_view.cpp"
        LINK_LIBRARIES Kokkos::kokkos
        CXX_STANDARD 17
        CXX_STANDARD_REQUIRED ON
        COMPILE_OUTPUT_VARIABLE _tessera_view_log)
if(NOT _tessera_view_compiles)
  message(FATAL_ERROR "A program that only includes Kokkos_Core.hpp and declares a View does not build with "
                      "Kokkos ${Kokkos_VERSION} and ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}; "
                      "the compiler said:\n${_tessera_view_log}")
endif()
if(NOT _tessera_view_run EQUAL 0)
  message(FATAL_ERROR "Kokkos ${Kokkos_VERSION} built with ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} "
                      "crashes when a default-constructed View is destroyed (the check program: ${_tessera_view_run}). This is a "
                      "known miscompile of Kokkos 4.5-4.6 by GCC 12.2-12.5 (kokkos/kokkos#8187, fixed in Kokkos 4.7), "
                      "and every Tessera program would crash in its first step. Use Kokkos 4.7 or later "
                      "(spack install kokkos@4.7:), or build Kokkos and Tessera with another compiler (GCC 13 or "
                      "later, or Clang).")
endif()
# Checked once per Kokkos and compiler.
set(TESSERA_KOKKOS_DEFAULT_VIEW_OK "${_tessera_view_key}" CACHE INTERNAL "Kokkos and compiler that passed the check")
