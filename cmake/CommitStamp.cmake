# Script mode (cmake -DSOURCE_DIR=... -DOUTPUT=... -P CommitStamp.cmake), run at every build: writes
# OUTPUT, a header defining ATTNFUZZ_COMMIT, the harness commit every finding records (git's short
# HEAD, "+dirty" when tracked files differ from it, "unknown" outside git). It rewrites the file
# only when the text changes, so what includes it recompiles only then. At configure time alone
# the stamp went stale with every commit an incremental build picked up.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT commit)
  set(commit unknown)
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY "${SOURCE_DIR}" RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty EQUAL 1)
    string(APPEND commit "+dirty")
  endif()
endif()
set(text "#pragma once\n#define ATTNFUZZ_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
