# ASan + UBSan for host code (preset "asan"). Applied globally so every target and test is
# instrumented the same way.
if(DSV4_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
# ThreadSanitizer (preset "tsan"): the thread pool and everything that runs on it.
option(DSV4_SANITIZE_THREAD "Build with TSan" OFF)
if(DSV4_SANITIZE_THREAD)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()
# libFuzzer coverage instrumentation for everything a fuzz target links (preset "fuzz").
if(DSV4_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
