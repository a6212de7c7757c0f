# kiln_add_layer(<name> SOURCES ... [CUDA_SOURCES ...] [DEPS <lower layers>...])
#
# Makes the static library kiln_<name> (alias kiln::<name>) from the sources of kiln/<name>/, publishes the
# headers found there (installed under include/kiln/<name>/), and links the layers it builds on.
set(KILN_LAYERS "" CACHE INTERNAL "")

function(kiln_add_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;CUDA_SOURCES;DEPS" ${ARGN})
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
  if(KILN_NATIVE)
    # PUBLIC: code that includes kiln's headers must see the same instruction set as kiln itself (half.h picks
    # F16C conversions when present; two answers to that in one program would break the one-definition rule).
    target_compile_options(${target} PUBLIC $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  set(KILN_LAYERS ${KILN_LAYERS} ${target} CACHE INTERNAL "")
endfunction()
