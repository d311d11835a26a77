#pragma once

// accel's kernels and fallbacks under the dispatch keys it borrows from LibTorch (torch_compat.h
// says which and why each is free): registered one way, for the process's life, after a check
// that this LibTorch has registered nothing of its own under the key.

#include <c10/core/DispatchKey.h>
#include <torch/library.h>

#include <functional>

namespace accel {
namespace util {

/// Registers `fallback` for every operator under `key`, then the kernels `add_kernels` adds to
/// an "aten" library under it (none when empty), and keeps them for the process's life (a
/// library's teardown at exit may still dispatch). First throws, naming the key, `owner` (what
/// borrows it, for the message) and this LibTorch's version, when LibTorch has a fallback or any
/// operator's kernel under the key: accel's would replace or be shadowed by it. Call once per
/// key (from a function-local static).
void register_borrowed_key(c10::DispatchKey key, const char* owner, torch::CppFunction fallback,
                           const std::function<void(torch::Library&)>& add_kernels = {});

}  // namespace util
}  // namespace accel
