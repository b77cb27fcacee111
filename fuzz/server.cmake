# libFuzzer targets of the server's request path and the chat parsers it relies on:
#   server_request_fuzz   request body -> validation -> encoding -> tokens -> output stream
#   chat_json_fuzz        chat::parse_json (+ dump_json round trip)
#   chat_completion_fuzz  chat::parse_completion and the streaming DSML parser
foreach(f server_request_fuzz chat_json_fuzz chat_completion_fuzz)
  add_executable(${f} ${CMAKE_CURRENT_LIST_DIR}/${f}.cc)
  target_link_libraries(${f} PRIVATE dsv4_server_protocol)
  target_include_directories(${f} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${f} PRIVATE -fsanitize=fuzzer)
  target_link_options(${f} PRIVATE -fsanitize=fuzzer)
  dsv4_warnings(${f})
endforeach()
target_compile_definitions(server_request_fuzz PRIVATE
  DSV4_TEST_TOKENIZER="${PROJECT_SOURCE_DIR}/tests/data/server/tokenizer.json")
