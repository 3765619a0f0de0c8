# Included after project() (CMAKE_PROJECT_INCLUDE) by .ci/run's CUDA build: a clean build, built
# once and never rebuilt, needs no header dependencies, and nvcc finds them with two more
# preprocessor passes over every file (about 2 s of each file's 25 s of Kokkos headers).
set(CMAKE_DEPFILE_FLAGS_CXX "")
