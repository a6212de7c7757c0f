# kiln_add_layer(<name> SOURCES ... [CUDA_SOURCES ...] [DEPS <lower layers>...] [PCH <header> | PCH_FROM <layer>])
#
# Makes the static library kiln_<name> (alias kiln::<name>) from the sources of kiln/<name>/, publishes the
# headers found there (installed under include/kiln/<name>/), and links the layers it builds on.
# PCH names the header of cmake/pch/ that the layer's C++ files are compiled with, precompiled for the layer;
# PCH_FROM uses a lower layer's precompiled header instead (the two must be compiled with the same flags).
set(KILN_LAYERS "" CACHE INTERNAL "")

# Precompiled headers for the library. Parsing the standard library and kiln's core headers is a large share of
# a library file's compile time, paid by each of its 135 files in both of CI's builds. Compiled one at a time,
# 13 files of 8 layers took 43 s without and 29 s with them (release), 9 files 60 s and 53 s (sanitized -O1);
# each precompiled header costs 5-8 s to make, so layers with the same flags share one (PCH_FROM), and
# serialize, with 4 files, has none. The tensor layer has flags of its own (-fno-math-errno, ...), so it makes
# its own; the CUDA files use none. The price: a source that forgets an include its precompiled header happens
# to provide still compiles, and only a build with KILN_PCH=OFF notices.
option(KILN_PCH "Precompile the standard and kiln headers most of each layer's files include" ON)

function(kiln_add_layer name)
  cmake_parse_arguments(ARG "" "PCH;PCH_FROM" "SOURCES;CUDA_SOURCES;DEPS" ${ARGN})
  set(target kiln_${name})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(kiln::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)
  if(KILN_WITH_CUDA AND ARG_CUDA_SOURCES)
    target_sources(${target} PRIVATE ${ARG_CUDA_SOURCES})
    set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  endif()
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.h)
  target_sources(${target} PUBLIC FILE_SET HEADERS BASE_DIRS ${PROJECT_SOURCE_DIR} FILES ${headers})
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  # PUBLIC: code that includes kiln's headers must see the same instruction set as kiln itself (half.h picks
  # F16C conversions when present; two answers to that in one program would break the one-definition rule).
  if(KILN_MARCH)
    target_compile_options(${target} PUBLIC $<$<COMPILE_LANGUAGE:CXX>:-march=${KILN_MARCH}>)
  elseif(KILN_NATIVE)
    target_compile_options(${target} PUBLIC $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  # CMake adds -Winvalid-pch: a header GCC refuses (other flags than it was compiled with) is a warning, and
  # only slower.
  if(KILN_PCH AND ARG_PCH)
    target_precompile_headers(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${PROJECT_SOURCE_DIR}/cmake/pch/${ARG_PCH}>")
  elseif(KILN_PCH AND ARG_PCH_FROM)
    target_precompile_headers(${target} REUSE_FROM kiln_${ARG_PCH_FROM})
  endif()
  if(KILN_PCH AND (ARG_PCH OR ARG_PCH_FROM) AND CCACHE_PROGRAM AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fpch-preprocess>)  # what ccache needs
  endif()
  set(KILN_LAYERS ${KILN_LAYERS} ${target} CACHE INTERNAL "")
endfunction()
