# libFuzzer target for the tokenizer: include() from fuzz/CMakeLists.txt once dsv4_tokenizer
# exists; needs clang. The library is instrumented for coverage (fuzzer-no-link) so libFuzzer
# can steer into the BPE, the regex splitting and the added-token matcher.
#   ./tokenizer_fuzz -max_total_time=60 -max_len=4096
add_executable(tokenizer_fuzz ${CMAKE_CURRENT_LIST_DIR}/tokenizer_fuzz.cc)
target_link_libraries(tokenizer_fuzz PRIVATE dsv4_tokenizer)
target_compile_definitions(tokenizer_fuzz PRIVATE
  DSV4_TOKENIZER_JSON="${PROJECT_SOURCE_DIR}/third_party/tokenizer/tokenizer.json")
target_compile_options(tokenizer_fuzz PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_options(tokenizer_fuzz PRIVATE -fsanitize=fuzzer,address,undefined)
target_compile_options(dsv4_tokenizer PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
target_link_libraries(dsv4_tokenizer INTERFACE -fsanitize=address,undefined)
dsv4_warnings(tokenizer_fuzz)
