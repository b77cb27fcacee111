# tokenizer_bench: encode/decode MB/s on English and CJK text (CPU only). Include from
# bench/CMakeLists.txt (or the top level) after the dsv4_tokenizer target exists.
add_executable(tokenizer_bench ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bench.cc)
target_include_directories(tokenizer_bench PRIVATE ${PROJECT_SOURCE_DIR}/include)
find_package(benchmark REQUIRED)
target_link_libraries(tokenizer_bench PRIVATE dsv4_tokenizer benchmark::benchmark)
target_compile_definitions(tokenizer_bench PRIVATE
  DSV4_TOKENIZER_JSON="${PROJECT_SOURCE_DIR}/third_party/tokenizer/tokenizer.json"
  DSV4_TOKENIZER_CASES="${PROJECT_SOURCE_DIR}/tests/data/tokenizer/cases.jsonl")
dsv4_warnings(tokenizer_bench)
