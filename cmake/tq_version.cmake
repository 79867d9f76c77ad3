# Build facts for `tqserve --version`: version, commit, build type, compiler. The commit is read again at every
# build (target tq_build_info runs cmake/tq_build_info.cmake), not only at configure time, so a binary rebuilt after
# a commit never names the older one; the generated file is rewritten only when its content changes.
find_package(Git QUIET)
set(TQ_COMPILER "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
set(TQ_BUILD_TYPE "${CMAKE_BUILD_TYPE}")
if(TQ_SANITIZE)
  string(APPEND TQ_BUILD_TYPE "+${TQ_SANITIZE}-sanitizer")
endif()
set(TQ_BUILD_INFO_ARGS
    -DROOT=${PROJECT_SOURCE_DIR} -DGIT=${GIT_EXECUTABLE} -DPROJECT_VERSION=${PROJECT_VERSION}
    -DTQ_BUILD_TYPE=${TQ_BUILD_TYPE} -DTQ_COMPILER=${TQ_COMPILER}
    -DSRC=${PROJECT_SOURCE_DIR}/common/build_info.cc.in -DOUT=${PROJECT_BINARY_DIR}/generated/build_info.cc
    -P ${PROJECT_SOURCE_DIR}/cmake/tq_build_info.cmake)
execute_process(COMMAND ${CMAKE_COMMAND} ${TQ_BUILD_INFO_ARGS} COMMAND_ERROR_IS_FATAL ANY)  # exists before the build
add_custom_target(tq_build_info COMMAND ${CMAKE_COMMAND} ${TQ_BUILD_INFO_ARGS}
                  BYPRODUCTS ${PROJECT_BINARY_DIR}/generated/build_info.cc VERBATIM)
