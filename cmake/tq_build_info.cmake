# Script mode (cmake -P), run by target tq_build_info at every build: writes OUT from SRC with the current commit
# (short hash, "-dirty" with uncommitted changes to tracked files, "unknown" outside a git checkout).
# In: ROOT, GIT, SRC, OUT, PROJECT_VERSION, TQ_BUILD_TYPE, TQ_COMPILER.
set(TQ_GIT_COMMIT "unknown")
if(GIT AND EXISTS "${ROOT}/.git")
  execute_process(COMMAND "${GIT}" rev-parse --short=12 HEAD WORKING_DIRECTORY "${ROOT}"
                  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  execute_process(COMMAND "${GIT}" status --porcelain --untracked-files=no WORKING_DIRECTORY "${ROOT}"
                  OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT commit STREQUAL "")
    set(TQ_GIT_COMMIT "${commit}")
    if(NOT dirty STREQUAL "")
      string(APPEND TQ_GIT_COMMIT "-dirty")
    endif()
  endif()
endif()
configure_file("${SRC}" "${OUT}" @ONLY)  # leaves OUT untouched when nothing changed
