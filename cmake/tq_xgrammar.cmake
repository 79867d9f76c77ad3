# xgrammar (Apache-2.0): JSON schema, regex and EBNF to a token-mask engine, the constrained decoder that vLLM,
# SGLang and TensorRT-LLM use. Not in the repo: its source distribution is fetched from PyPI at configure time,
# pinned by version and SHA-256, and kept in TQ_DEPS_DIR (default ~/.cache/tqserve/deps) so a rebuild needs no
# network. Only its C++ core is built (no Python bindings), as a static library with its own warnings off.
set(TQ_XGRAMMAR_VERSION 0.2.9)
set(TQ_XGRAMMAR_SHA256 87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90)
set(TQ_XGRAMMAR_URL
    "https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-${TQ_XGRAMMAR_VERSION}.tar.gz")
if(DEFINED ENV{TQ_DEPS_DIR})
  set(tq_deps_default "$ENV{TQ_DEPS_DIR}")
else()
  set(tq_deps_default "$ENV{HOME}/.cache/tqserve/deps")
endif()
set(TQ_DEPS_DIR "${tq_deps_default}" CACHE PATH "Where fetched third-party source archives are kept")

set(tq_xg_archive "${TQ_DEPS_DIR}/xgrammar-${TQ_XGRAMMAR_VERSION}.tar.gz")
if(EXISTS "${tq_xg_archive}")
  file(SHA256 "${tq_xg_archive}" tq_xg_have)
  if(NOT tq_xg_have STREQUAL TQ_XGRAMMAR_SHA256)
    message(STATUS "tqserve: ${tq_xg_archive} has the wrong checksum; fetching it again")
    file(REMOVE "${tq_xg_archive}")
  endif()
endif()
if(NOT EXISTS "${tq_xg_archive}")
  message(STATUS "tqserve: fetching xgrammar ${TQ_XGRAMMAR_VERSION} from PyPI")
  file(MAKE_DIRECTORY "${TQ_DEPS_DIR}")
  file(DOWNLOAD "${TQ_XGRAMMAR_URL}" "${tq_xg_archive}.part" EXPECTED_HASH SHA256=${TQ_XGRAMMAR_SHA256}
       STATUS tq_xg_status TLS_VERIFY ON)
  list(GET tq_xg_status 0 tq_xg_code)
  if(NOT tq_xg_code EQUAL 0)
    file(REMOVE "${tq_xg_archive}.part")
    message(FATAL_ERROR "tqserve: could not fetch ${TQ_XGRAMMAR_URL} (${tq_xg_status}). Put the file "
                        "(sha256 ${TQ_XGRAMMAR_SHA256}) at ${tq_xg_archive} to build offline.")
  endif()
  file(RENAME "${tq_xg_archive}.part" "${tq_xg_archive}")
endif()

set(tq_xg_root "${CMAKE_BINARY_DIR}/_deps/xgrammar-${TQ_XGRAMMAR_VERSION}")
if(NOT EXISTS "${tq_xg_root}/include/xgrammar/xgrammar.h")
  file(ARCHIVE_EXTRACT INPUT "${tq_xg_archive}" DESTINATION "${CMAKE_BINARY_DIR}/_deps")
endif()

file(GLOB_RECURSE tq_xg_sources "${tq_xg_root}/cpp/*.cc")
list(FILTER tq_xg_sources EXCLUDE REGEX "/cpp/tvm_ffi/")
add_library(tq_xgrammar STATIC ${tq_xg_sources})
set_target_properties(tq_xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
target_include_directories(tq_xgrammar SYSTEM PUBLIC "${tq_xg_root}/include" "${tq_xg_root}/3rdparty/dlpack/include")
target_include_directories(tq_xgrammar SYSTEM PRIVATE "${tq_xg_root}/3rdparty/picojson")
target_compile_definitions(tq_xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
target_compile_options(tq_xgrammar PRIVATE -w)
