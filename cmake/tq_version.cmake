# Build facts for `tqserve --version`: version, commit, build type, compiler.
find_package(Git QUIET)
set(TQ_GIT_COMMIT "unknown")
if(GIT_FOUND AND EXISTS ${PROJECT_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE TQ_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE TQ_GIT_DIRTY OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(TQ_GIT_COMMIT STREQUAL "")
    set(TQ_GIT_COMMIT "unknown")
  elseif(NOT TQ_GIT_DIRTY STREQUAL "")
    string(APPEND TQ_GIT_COMMIT "-dirty")
  endif()
endif()
set(TQ_COMPILER "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
set(TQ_BUILD_TYPE "${CMAKE_BUILD_TYPE}")
if(TQ_SANITIZE)
  string(APPEND TQ_BUILD_TYPE "+${TQ_SANITIZE}-sanitizer")
endif()
configure_file(${PROJECT_SOURCE_DIR}/common/build_info.cc.in ${PROJECT_BINARY_DIR}/generated/build_info.cc @ONLY)
