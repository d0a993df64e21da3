// A tensor's shape as text for error messages, "[4, 32]", built without streams.
//
// Why not stream `t.sizes()` into TORCH_CHECK as torch's own code does: with torch 2.11.0+cu130
// and GCC 13.3 (an H200 machine, 2026-11-27), formatting an IntArrayRef in an extension built
// just in time segfaulted, in torch's own load_inline too, while messages with strings, numbers
// and devices printed fine. A user who passes a wrongly shaped tensor must get the message, not a
// crash, so the shapes are written out here.
#pragma once

#include <cstddef>
#include <string>

// Any sizes both ABIs hand out: c10::IntArrayRef, the stable API's IntHeaderOnlyArrayRef.
template <typename Sizes>
std::string shape_text(const Sizes& sizes) {
  std::string text = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(sizes[i]);
  }
  return text + "]";
}
