# Warnings and sanitizers for our own targets, and small helpers for libraries and tests.

set(TQ_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Woverloaded-virtual
    -Wimplicit-fallthrough -Wno-unused-parameter -Wno-missing-field-initializers)
# GCC 12 reports a false -Wrestrict inside std::string's operator+ (GCC bug 105329).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND TQ_WARNINGS -Wno-restrict)
endif()

set(TQ_SAN_FLAGS "")
if(TQ_SANITIZE STREQUAL "address")
  set(TQ_SAN_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
elseif(TQ_SANITIZE STREQUAL "thread")
  set(TQ_SAN_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT TQ_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TQ_SANITIZE must be '', 'address' or 'thread', not '${TQ_SANITIZE}'")
endif()
if(TQ_SAN_FLAGS)
  add_compile_options(${TQ_SAN_FLAGS})
  add_link_options(${TQ_SAN_FLAGS})
endif()

# tq_target_defaults(<target>): include root, warnings.
function(tq_target_defaults target)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TQ_WARNINGS}>)
endfunction()

# tq_library(<name> SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
function(tq_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  tq_target_defaults(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# A test that could not run here exits with this code (tests/support/gtest_main.cc, skip_test in
# tests/integration/lib.sh, the pytest hook in tests/integration/conftest.py); ctest then reports it as Skipped and
# scripts/test-skips.py lists the reason. Every test has it: tq_test sets it, other add_test calls use tq_skippable.
set(TQ_SKIP_EXIT_CODE 77)

# tq_skippable(<test> ...): the tests named report skips by TQ_SKIP_EXIT_CODE.
function(tq_skippable)
  set_tests_properties(${ARGN} PROPERTIES SKIP_RETURN_CODE ${TQ_SKIP_EXIT_CODE})
endfunction()

# tq_test(<name> SOURCES ... [DEPS ...] [LABELS unit|integration|slow|gpu ...] [TIMEOUT s])
# Builds a GoogleTest binary and registers it with ctest under its labels.
function(tq_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  tq_target_defaults(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} tq_gtest_main GTest::gtest GTest::gmock)
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                       SKIP_RETURN_CODE ${TQ_SKIP_EXIT_CODE}
                       ENVIRONMENT "TQ_TEST_SOURCE_DIR=${PROJECT_SOURCE_DIR};TQ_TEST_BINARY_DIR=${PROJECT_BINARY_DIR}")
endfunction()
