# Debian's Kokkos 3.4 (Trilinos packaging) exports Kokkos::kokkos with an include
# directory that does not exist; its headers live in ${Kokkos_INCLUDE_DIRS}
# (/usr/include/trilinos). Point the target there. A Kokkos 4 from Spack or a source
# build exports correct paths and is left alone.
if(TARGET Kokkos::kokkos AND DEFINED Kokkos_INCLUDE_DIRS)
  get_target_property(_tessera_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  set(_tessera_kk_ok FALSE)
  foreach(_d IN LISTS _tessera_kk_inc)
    if(EXISTS "${_d}/Kokkos_Core.hpp")
      set(_tessera_kk_ok TRUE)
    endif()
  endforeach()
  if(NOT _tessera_kk_ok)
    foreach(_d IN LISTS Kokkos_INCLUDE_DIRS)
      get_filename_component(_d "${_d}" REALPATH)
      if(EXISTS "${_d}/Kokkos_Core.hpp")
        set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_d}")
      endif()
    endforeach()
  endif()
endif()
