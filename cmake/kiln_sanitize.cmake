# KILN_SANITIZE: builds everything below the top-level CMakeLists.txt (kiln's layers, tests, benchmarks,
# examples) with a sanitizer. Included before the first add_subdirectory, so directory-wide compile and link
# options reach every target; scripts/sanitize.sh is the usual way in.
#
#   OFF        no sanitizer (default)
#   address    AddressSanitizer (with LeakSanitizer) + UndefinedBehaviorSanitizer
#   undefined  UndefinedBehaviorSanitizer only (fast; no leak checks)
#
# Only C++ compilations and links get the flags: nvcc would need each one behind -Xcompiler, and device code
# is not sanitized anyway. Run a sanitized binary with UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 to make a
# UBSan report fail the test (UBSan otherwise reports and goes on).
set(KILN_SANITIZE "OFF" CACHE STRING "Sanitizers for every kiln target: OFF, address (ASan+LSan+UBSan), undefined (UBSan)")
set_property(CACHE KILN_SANITIZE PROPERTY STRINGS OFF address undefined)

if(KILN_SANITIZE STREQUAL "address")
  set(_kiln_sanitize_flags -fsanitize=address,undefined)
elseif(KILN_SANITIZE STREQUAL "undefined")
  set(_kiln_sanitize_flags -fsanitize=undefined)
elseif(NOT KILN_SANITIZE OR KILN_SANITIZE STREQUAL "")
  set(_kiln_sanitize_flags "")
else()
  message(FATAL_ERROR "kiln: KILN_SANITIZE=${KILN_SANITIZE} is not one of OFF, address, undefined")
endif()

if(_kiln_sanitize_flags)
  # Frame pointers give the sanitizers' fast unwinder whole stacks in their reports.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_kiln_sanitize_flags};-fno-omit-frame-pointer>")
  add_link_options("$<$<LINK_LANGUAGE:CXX>:${_kiln_sanitize_flags}>")
  # Executables are linked without -pie: UBSan gives every check a static record of pointers (source location,
  # type), about 5 million of them in a test executable, and a position-independent executable relocates them
  # all at every start (128 MB of .rela.dyn). Each CTest case is a process of its own, so that was 0.11 of the
  # 0.26 s a sanitized test took to start and exit; linked at fixed addresses the records need no relocation.
  add_link_options("$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:-no-pie>")
  message(STATUS "kiln: sanitizers on (${_kiln_sanitize_flags})")
endif()
