# Project-wide warning flags for C++ sources (CUDA sources get their own in cuda.cmake).
function(dsv4_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow=local -Wno-unused-parameter>)
  if(DSV4_FATAL_WARNINGS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
