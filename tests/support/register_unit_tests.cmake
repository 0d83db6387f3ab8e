# Registers the unit tests with ctest when ctest starts (a TEST_INCLUDE_FILES script written by
# tests/CMakeLists.txt, which sets SITSRT_UNIT_TEST_DIR and SITSRT_UNIT_TESTS). Per executable:
#   <name>                 its cases but those tagged [gated], as one test;
#   <name>: <case>         each [gated] case, as a test of its own, skipped when the case skips
#                          (exit code 77, support/skip.hpp).
# The cases are listed from the built executable, so a new [gated] case needs no CMake edit.
# An executable not built yet is registered as is, and ctest reports it missing.
foreach(test_name IN LISTS SITSRT_UNIT_TESTS)
  set(exe "${SITSRT_UNIT_TEST_DIR}/${test_name}")
  if(NOT EXISTS "${exe}")
    add_test("${test_name}" "${exe}")
    continue()
  endif()
  foreach(kind plain gated)
    if(kind STREQUAL "plain")
      set(spec "~[gated]")
    else()
      set(spec "[gated]")
    endif()
    # --list-test-names-only exits with the number of cases it lists.
    execute_process(COMMAND "${exe}" "${spec}" --list-test-names-only
                    OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE listed)
    if(NOT listed MATCHES "^[0-9]+$")
      message(WARNING "${exe} could not list its cases (${listed}): ${errors}")
      add_test("${test_name}" "${exe}")
      break()
    endif()
    if(kind STREQUAL "plain")
      string(STRIP "${listing}" listing)
      if(NOT listing STREQUAL "")  # an executable with [gated] cases only has no plain test
        add_test("${test_name}" "${exe}" "~[gated]")
      endif()
      continue()
    endif()
    string(REPLACE ";" "<semicolon>" listing "${listing}")  # case names may hold ';'
    string(REPLACE "\n" ";" cases "${listing}")
    foreach(case IN LISTS cases)
      if(case STREQUAL "")
        continue()
      endif()
      string(REPLACE "<semicolon>" ";" case "${case}")
      # A case selected by its exact name: escape what Catch2's test-spec parser reads.
      set(case_spec "${case}")
      foreach(char \\ , [ ] ~)
        string(REPLACE "${char}" "\\${char}" case_spec "${case_spec}")
      endforeach()
      add_test("${test_name}: ${case}" "${exe}" "${case_spec}")
      set_tests_properties("${test_name}: ${case}" PROPERTIES SKIP_RETURN_CODE 77 LABELS gated)
    endforeach()
  endforeach()
endforeach()
