# Run by ctest before it runs anything (the TEST_INCLUDE_FILES of tests/): one ctest test per
# GoogleTest suite of a test binary, not one per test. A suite's SetUpTestSuite (a venv made with
# pip, a materialised corpus, built wheels) then runs once for the suite instead of once for each
# of its tests, each in a process of its own. Each suite writes GoogleTest's XML report to
# XML_DIR, from which .ci/test_summary.py counts every test, and names every skip with its reason.
#
# Set by the file that includes this one (tests/CMakeLists.txt, cudafix_gtest_suites): EXE (the
# test binary), PREFIX (the ctest name's first word), XML_DIR (this binary's own), TIMEOUT,
# ENVIRONMENT (a list of VAR=VALUE), COSTS_FILE (cmake/costs.txt: each long suite's COST, so that
# ctest starts the longest first).
execute_process(COMMAND "${EXE}" --gtest_list_tests OUTPUT_VARIABLE listing ERROR_VARIABLE errors
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  # A binary that cannot list its tests is a failed test, not an empty suite.
  add_test("${PREFIX}.ListTests" "${EXE}" --gtest_list_tests)
  return()
endif()
# Reports of an earlier run would be counted again.
file(REMOVE_RECURSE "${XML_DIR}")
file(MAKE_DIRECTORY "${XML_DIR}")
file(STRINGS "${COSTS_FILE}" cost_lines REGEX "^[^#]")
set(costs "")
foreach(cost_line IN LISTS cost_lines)
  string(REPLACE " " "=" cost_line "${cost_line}")
  list(APPEND costs "${cost_line}")
endforeach()
string(REPLACE "\n" ";" lines "${listing}")
foreach(line IN LISTS lines)
  # A suite's line starts in column 1 and ends with a dot, before any "  # TypeParam = ..." note.
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(REPLACE "/" "_" file_name "${PREFIX}.${suite}")
    add_test("${PREFIX}.${suite}" "${EXE}" "--gtest_filter=${suite}.*"
             "--gtest_output=xml:${XML_DIR}/${file_name}.xml")
    set_tests_properties("${PREFIX}.${suite}" PROPERTIES TIMEOUT "${TIMEOUT}" ENVIRONMENT "${ENVIRONMENT}"
                                                         LABELS gtest)
    set(cost "${costs}")
    list(FILTER cost INCLUDE REGEX "^${PREFIX}\\.${suite}=")
    if(cost)
      string(REGEX REPLACE ".*=" "" cost "${cost}")
      set_tests_properties("${PREFIX}.${suite}" PROPERTIES COST "${cost}")
    endif()
  endif()
endforeach()
