// util::register_borrowed_key refuses a dispatch key LibTorch (or anyone before it) already
// registered something under, naming the key, the borrower, what is there and the version.

#include "util/dispatch_registration.h"

#include <gtest/gtest.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <string>

namespace {

/// The message register_borrowed_key throws for `key`, empty when it registers.
std::string borrow_refusal(c10::DispatchKey key, const char* owner) {
  try {
    accel::util::register_borrowed_key(key, owner, torch::CppFunction::makeFallthrough());
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// A key nothing in LibTorch's C++ library registers under: the first borrower gets it, the
// second is refused, as the fallback is there.
TEST(DispatchRegistration, AKeyIsBorrowedOnceAndThenRefusedNamingItsFallback) {
  EXPECT_EQ(borrow_refusal(c10::DispatchKey::PrivateUse3, "the first borrower"), "");
  const auto second = borrow_refusal(c10::DispatchKey::PrivateUse3, "the second borrower");
  EXPECT_NE(second.find("the second borrower borrows the dispatch key PrivateUse3"),
            std::string::npos)
      << second;
  EXPECT_NE(second.find("a fallback registered under it"), std::string::npos) << second;
  EXPECT_NE(second.find("this LibTorch (" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                        std::to_string(TORCH_VERSION_MINOR) + "."),
            std::string::npos)
      << second;
}

at::Tensor planted_add(const at::Tensor& self, const at::Tensor&, const at::Scalar&) {
  return self;
}

// An operator's kernel under the key (as a LibTorch that took the key for itself would have):
// refused, naming the operator.
TEST(DispatchRegistration, AKeyWithAnOperatorsKernelIsRefusedNamingTheOperator) {
  torch::Library planted(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse2, __FILE__,
                         __LINE__);
  planted.impl("add.Tensor", TORCH_FN(planted_add));
  const auto refused = borrow_refusal(c10::DispatchKey::PrivateUse2, "a test");
  EXPECT_NE(refused.find("a test borrows the dispatch key PrivateUse2"), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("aten::add.Tensor"), std::string::npos) << refused;
}

}  // namespace
