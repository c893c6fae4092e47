# JIFFY_KERNELS_ONLY: the kernel library (src/kernels, which depends on nothing else in the
# engine) and the kernel unit tests, with GoogleTest built from /usr/src/googletest by the same
# (possibly cross) compiler. Included from the top-level CMakeLists.txt with JIFFY_SOURCES set.
list(FILTER JIFFY_SOURCES INCLUDE REGEX "src/kernels/")
add_library(jiffy_kernels STATIC ${JIFFY_SOURCES})
target_include_directories(jiffy_kernels PUBLIC ${CMAKE_SOURCE_DIR}/src)

if(JIFFY_BUILD_TESTS)
  set(JIFFY_GTEST_SRC /usr/src/googletest CACHE PATH "GoogleTest sources (Debian googletest)")
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(${JIFFY_GTEST_SRC} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  target_compile_options(gtest PRIVATE -w)
  target_compile_options(gtest_main PRIVATE -w)
  enable_testing()
  # Kernel-level tests only (the op-level ones need the whole engine).
  add_executable(jiffy_kernel_tests ${CMAKE_SOURCE_DIR}/tests/unit/gemm_test.cpp
                                    ${CMAKE_SOURCE_DIR}/tests/unit/kernels_isa_test.cpp
                                    ${CMAKE_SOURCE_DIR}/tests/unit/pool_kernel_test.cpp
                                    ${CMAKE_SOURCE_DIR}/tests/unit/conv_cv_test.cpp
                                    ${CMAKE_SOURCE_DIR}/tests/unit/gemv_narrow_test.cpp
                                    ${CMAKE_SOURCE_DIR}/tests/unit/winograd_test.cpp
                                    ${CMAKE_SOURCE_DIR}/tests/unit/conv_nhwc_test.cpp)
  target_link_libraries(jiffy_kernel_tests PRIVATE jiffy_kernels gtest gtest_main Threads::Threads)
  # Each ISA forced through JIFFY_ISA (the tests also loop over every ISA the CPU has); under a
  # cross build, ctest runs them through CMAKE_CROSSCOMPILING_EMULATOR (qemu-aarch64).
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64|ARM64")
    set(JIFFY_TEST_ISAS scalar neon)
  else()
    set(JIFFY_TEST_ISAS scalar avx2 avx512)
  endif()
  foreach(isa ${JIFFY_TEST_ISAS})
    add_test(NAME kernels_isa_${isa} COMMAND jiffy_kernel_tests)
    set_tests_properties(kernels_isa_${isa} PROPERTIES ENVIRONMENT "JIFFY_ISA=${isa}" TIMEOUT 300)
  endforeach()
endif()
