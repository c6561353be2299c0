# Runs PROGRAM with ARGS (a ;-list) and fails unless it exits with EXPECT and, for a
# failure, prints exactly one line on stderr after the usage line (if any).
# Usage: cmake -DPROGRAM=... -DARGS=... -DEXPECT=N -P expect_exit.cmake
execute_process(COMMAND ${PROGRAM} ${ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL EXPECT)
  message(FATAL_ERROR "exit ${rc}, expected ${EXPECT}; stderr: ${err}")
endif()
if(NOT EXPECT EQUAL 0)
  string(REGEX MATCHALL "qem-native-load: [^\n]*\n" messages "${err}")
  list(LENGTH messages n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one 'qem-native-load: ...' line on stderr, got: ${err}")
  endif()
endif()
