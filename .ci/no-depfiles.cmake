# Included after project() (CMAKE_PROJECT_INCLUDE) by .ci/run's CUDA build: a build made once and
# removed before the next (.ci/run) needs no header dependencies, and nvcc finds them with two
# more preprocessor passes over every file (about 2 s of each file's 25 s of Kokkos headers).
set(CMAKE_DEPFILE_FLAGS_CXX "")
