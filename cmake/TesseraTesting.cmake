# tessera_add_mpi_test(NAME <name> SOURCES <files...> NP <n...> [BACKENDS <b...>] [TIMEOUT <s>])
#
# Builds one GoogleTest executable and registers a ctest test per (backend, rank count),
# named <name>_<backend>_np<n>, run as `mpiexec -n <n> <exe>` with TESSERA_TEST_BACKEND set.
# Without BACKENDS the test is backend-independent and named <name>_np<n>. NCCL needs a GPU
# per rank, so the nccl backend runs at the rank counts up to TESSERA_TEST_GPUS (at least
# 1); where no GPU is usable its tests report themselves skipped.

execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _tessera_mpiexec_version
                ERROR_QUIET)
set(TESSERA_MPIEXEC_PREFLAGS ${MPIEXEC_PREFLAGS})
if(_tessera_mpiexec_version MATCHES "Open MPI|OpenRTE")
  # The test suite runs up to 4 ranks on machines with fewer cores.
  list(APPEND TESSERA_MPIEXEC_PREFLAGS --oversubscribe)
endif()

if(NOT DEFINED TESSERA_TEST_GPUS)
  set(_gpus 0)
  execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE _rc OUTPUT_VARIABLE _list ERROR_QUIET)
  if(_rc EQUAL 0)
    string(REGEX MATCHALL "GPU [0-9]+:" _found "${_list}")
    list(LENGTH _found _gpus)
  endif()
  set(TESSERA_TEST_GPUS ${_gpus} CACHE STRING "GPUs of the machine that runs the tests (NCCL tests use one per rank)")
endif()
set(TESSERA_TEST_SKIPPED "SKIPPED: ")  # what a test program prints when it cannot run here

function(tessera_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;NP;BACKENDS;LIBS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${T_NAME} ${T_SOURCES} $<TARGET_OBJECTS:tessera_test_main>)  # tests/CMakeLists.txt
  target_link_libraries(${T_NAME} PRIVATE Tessera::tessera GTest::gtest tessera_warnings ${T_LIBS})
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/src)
  set(_backends ${T_BACKENDS})
  if(NOT _backends)
    set(_backends none)
  endif()
  foreach(_backend IN LISTS _backends)
    foreach(_np IN LISTS T_NP)
      if(_backend STREQUAL "nccl" AND _np GREATER 1 AND _np GREATER TESSERA_TEST_GPUS)
        continue()
      endif()
      if(_backend STREQUAL "none")
        set(_test ${T_NAME}_np${_np})
      else()
        set(_test ${T_NAME}_${_backend}_np${_np})
      endif()
      add_test(NAME ${_test}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${_np} ${TESSERA_MPIEXEC_PREFLAGS}
                       $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(${_test} PROPERTIES TIMEOUT ${T_TIMEOUT} PROCESSORS ${_np}
        SKIP_REGULAR_EXPRESSION "${TESSERA_TEST_SKIPPED}"
        ENVIRONMENT "TESSERA_TEST_BACKEND=${_backend};OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
    endforeach()
  endforeach()
endfunction()
