# Compile options for accel's own targets. Third-party headers (LibTorch, gtest) come in as
# SYSTEM includes, so -Werror applies to our code only.

function(accel_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
endfunction()

# With ACCEL_UNITY_BUILD (CI's two trees) every target compiles its sources in batches of eight,
# one translation unit each (CMake's unity build): LibTorch's and Clang's headers are parsed, and
# their inline functions instantiated and compiled, once a batch instead of once a source. A cold
# Release build here: 7.4 min and 860 CPU-seconds at -j2, against 12.4 min a source at a time
# (13.7 min and 1,630 CPU-seconds at -j4).
# Off for development, where a changed source recompiles alone. What a batch could hide (a source
# leaning on another's includes) is still caught: development builds compile every source alone,
# and so does CI's layout.function_size for runtime/src and launcher/lib (clang-tidy).
if(ACCEL_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE 8)
endif()

if(ACCEL_SANITIZE)
  # vptr checks need RTTI of every class they see; LibTorch's prebuilt classes would trip them.
  set(ACCEL_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize=vptr
                            -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_compile_options(${ACCEL_SANITIZER_FLAGS})
  add_link_options(-fsanitize=address,undefined)
endif()
