# gantry_module(NAME DEPS ...): builds src/NAME/*.cc (minus tests, benchmarks, fuzzers) into the
# library gantry_NAME, and src/NAME/*_test.cc into the test binary gantry_NAME_test.

# Modules that run thread pools and servers (common: the pool itself, the parallel copy and the
# metrics registry): their tests carry the ctest label `threaded`, which
# the `tsan` preset (ThreadSanitizer) runs.
set(GANTRY_THREADED_MODULES common storage cache ckpt agent data control)

function(gantry_module name)
  cmake_parse_arguments(M "" "" "DEPS" ${ARGN})
  file(GLOB all_sources CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/src/${name}/*.cc")
  set(lib_sources "")
  set(test_sources "")
  foreach(f IN LISTS all_sources)
    if(f MATCHES "_test\\.cc$")
      list(APPEND test_sources ${f})
    elseif(f MATCHES "_(benchmark|fuzz)\\.cc$")
    else()
      list(APPEND lib_sources ${f})
    endif()
  endforeach()
  if(NOT lib_sources)
    # A module with headers only (or not written yet) still links like the others.
    add_library(gantry_${name} INTERFACE)
    target_include_directories(gantry_${name} INTERFACE ${CMAKE_SOURCE_DIR}/include)
    target_link_libraries(gantry_${name} INTERFACE ${M_DEPS})
  else()
    add_library(gantry_${name} STATIC ${lib_sources})
    target_include_directories(gantry_${name} PUBLIC ${CMAKE_SOURCE_DIR}/include PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(gantry_${name} PUBLIC ${M_DEPS})
    target_compile_options(gantry_${name} PRIVATE ${GANTRY_WARNINGS})
  endif()
  if(GANTRY_TESTS AND test_sources)
    add_executable(gantry_${name}_test ${test_sources})
    target_link_libraries(gantry_${name}_test PRIVATE gantry_${name} GTest::gtest GTest::gmock GTest::gtest_main)
    target_include_directories(gantry_${name}_test PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_compile_options(gantry_${name}_test PRIVATE ${GANTRY_WARNINGS})
    target_compile_definitions(gantry_${name}_test PRIVATE
      GANTRY_SOURCE_DIR="${CMAKE_SOURCE_DIR}" GANTRY_WEB_DIR="${GANTRY_WEB_DIR}")
    gtest_discover_tests(gantry_${name}_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS unit)
    if(name IN_LIST GANTRY_THREADED_MODULES)
      # A second label cannot go through gtest_discover_tests' PROPERTIES (its post-build step
      # splits the list), so a file that ctest reads after the discovered tests adds it.
      set(labels_file "${CMAKE_BINARY_DIR}/gantry_${name}_test_labels.cmake")
      file(WRITE "${labels_file}"
        "foreach(t IN LISTS gantry_${name}_test_TESTS)\n"
        "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"unit;threaded\")\n"
        "endforeach()\n")
      set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
    endif()
  endif()
endfunction()
