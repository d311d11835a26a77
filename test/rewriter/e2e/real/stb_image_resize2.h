// real_corpus.sh's, not the program's: prabhuomkar/pytorch-cpp's image_io includes stb's
// stb_image_resize2.h, which its CMake downloads; Debian's libstb-dev has the first version,
// stb_image_resize.h. The one call image_io makes, on the first version's resizer.
#pragma once

#include "stb_image_resize.h"

typedef enum { STBIR_1CHANNEL = 1, STBIR_2CHANNEL = 2, STBIR_RGB = 3, STBIR_RGBA = 4 } stbir_pixel_layout;

inline unsigned char* stbir_resize_uint8_linear(const unsigned char* input, int input_w,
                                                int input_h, int input_stride,
                                                unsigned char* output, int output_w, int output_h,
                                                int output_stride, stbir_pixel_layout layout) {
  return stbir_resize_uint8(input, input_w, input_h, input_stride, output, output_w, output_h,
                            output_stride, static_cast<int>(layout))
             ? output
             : nullptr;
}
