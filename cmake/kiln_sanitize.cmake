# KILN_SANITIZE: builds everything below the top-level CMakeLists.txt (kiln's layers, tests, benchmarks,
# examples) with a sanitizer. Included before the first add_subdirectory, so directory-wide compile and link
# options reach every target; scripts/sanitize.sh is the usual way in.
#
#   OFF        no sanitizer (default)
#   address    AddressSanitizer (with LeakSanitizer) + UndefinedBehaviorSanitizer
#   undefined  UndefinedBehaviorSanitizer only (fast; no leak checks)
#   thread     ThreadSanitizer (data races, lock order). Debian's libgomp is not instrumented, so its threads'
#              synchronization is invisible to TSan: run with OMP_NUM_THREADS=1, or reports inside OpenMP
#              regions are noise. Not part of CI; for the code that has threads of its own (allocator and
#              pinned caches, DataLoader workers, process groups' engines):
#              cmake -B build-tsan -DKILN_SANITIZE=thread -DKILN_CUDA=OFF && OMP_NUM_THREADS=1 ctest ...
#
# Only C++ compilations and links get the flags: nvcc would need each one behind -Xcompiler, and device code
# is not sanitized anyway. Run a sanitized binary with UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 to make a
# UBSan report fail the test (UBSan otherwise reports and goes on).
set(KILN_SANITIZE "OFF" CACHE STRING "Sanitizers for every kiln target: OFF, address (ASan+LSan+UBSan), undefined (UBSan), thread (TSan)")
set_property(CACHE KILN_SANITIZE PROPERTY STRINGS OFF address undefined thread)

if(KILN_SANITIZE STREQUAL "address")
  set(_kiln_sanitize_flags -fsanitize=address,undefined)
elseif(KILN_SANITIZE STREQUAL "undefined")
  set(_kiln_sanitize_flags -fsanitize=undefined)
elseif(KILN_SANITIZE STREQUAL "thread")
  set(_kiln_sanitize_flags -fsanitize=thread)
elseif(NOT KILN_SANITIZE OR KILN_SANITIZE STREQUAL "")
  set(_kiln_sanitize_flags "")
else()
  message(FATAL_ERROR "kiln: KILN_SANITIZE=${KILN_SANITIZE} is not one of OFF, address, undefined, thread")
endif()

if(_kiln_sanitize_flags)
  # Frame pointers give the sanitizers' fast unwinder whole stacks in their reports.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_kiln_sanitize_flags};-fno-omit-frame-pointer>")
  add_link_options("$<$<LINK_LANGUAGE:CXX>:${_kiln_sanitize_flags}>")
  # Executables are linked without -pie: UBSan gives every check a static record of pointers (source location,
  # type), about 5 million of them in a test executable, and a position-independent executable relocates them
  # all at every start (128 MB of .rela.dyn): 0.11 of the 0.26 s a sanitized test process took to start and
  # exit. Linked at fixed addresses, the records need no relocation. ThreadSanitizer keeps -pie: its memory
  # layout is built around position-independent executables.
  if(NOT KILN_SANITIZE STREQUAL "thread")
    add_link_options("$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:-no-pie>")
  endif()
  message(STATUS "kiln: sanitizers on (${_kiln_sanitize_flags})")
endif()
