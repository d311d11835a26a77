#include "dispatch_registration.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <mutex>
#include <string>
#include <vector>

namespace accel {
namespace util {
namespace {

/// What LibTorch has registered under `key`: "a fallback" and operators' names, the first few.
std::vector<std::string> registered_under(c10::DispatchKey key) {
  auto& dispatcher = c10::Dispatcher::singleton();
  std::vector<std::string> found;
  if (dispatcher.hasBackendFallbackForDispatchKey(key)) found.push_back("a fallback");
  for (const auto& op : dispatcher.getAllOpNamesForDispatchKey(key)) {
    if (found.size() == 4) {
      found.push_back("...");
      break;
    }
    found.push_back(c10::toString(op));
  }
  return found;
}

/// Holds the libraries for the process's life (reachable, so no leak is reported, and never
/// destroyed: a library's teardown at exit may still dispatch).
void keep(torch::Library* library) {
  static std::mutex mutex;
  static auto* kept = new std::vector<torch::Library*>();
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(library);
}

}  // namespace

void register_borrowed_key(c10::DispatchKey key, const char* owner, torch::CppFunction fallback,
                           const std::function<void(torch::Library&)>& add_kernels) {
  const auto taken = registered_under(key);
  if (!taken.empty()) {
    std::string what;
    for (const auto& item : taken) what += (what.empty() ? "" : ", ") + item;
    TORCH_CHECK(false, "accel: ", owner, " borrows the dispatch key ", c10::toString(key),
                ", which this LibTorch (", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".",
                TORCH_VERSION_PATCH, ") uses itself: ", what,
                " registered under it. accel's choice of keys is made for the LibTorch it was "
                "built against (runtime/src/util/torch_compat.h)");
  }
  auto* fallbacks = new torch::Library(torch::Library::IMPL, "_", key, __FILE__, __LINE__);
  keep(fallbacks);
  fallbacks->fallback(std::move(fallback));
  if (add_kernels) {
    auto* kernels = new torch::Library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
    keep(kernels);
    add_kernels(*kernels);
  }
}

}  // namespace util
}  // namespace accel
