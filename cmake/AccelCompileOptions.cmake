# Compile options for accel's own targets. Third-party headers (LibTorch, gtest) come in as
# SYSTEM includes, so -Werror applies to our code only.

function(accel_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()

if(ACCEL_SANITIZE)
  # vptr checks need RTTI of every class they see; LibTorch's prebuilt classes would trip them.
  set(ACCEL_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize=vptr
                            -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_compile_options(${ACCEL_SANITIZER_FLAGS})
  add_link_options(-fsanitize=address,undefined)
endif()
