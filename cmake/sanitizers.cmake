# ASan + UBSan for host code (preset "asan"). Applied globally so every target and test is
# instrumented the same way.
if(DSV4_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
