//===- CudaApiCheck.cpp ---------------------------------------------------------------------===//
#include "CudaApiCheck.h"

#include "TorchPatterns.h"

#include "clang/AST/ExprCXX.h"
#include "clang/Basic/CharInfo.h"

using namespace clang;
using namespace clang::ast_matchers;

namespace accel::migrate {

void CudaApiCheck::registerMatchers(MatchFinder &Finder) {
  Finder.addMatcher(callExpr(callee(functionDecl().bind("fn"))).bind("call"), this);
  Finder.addMatcher(varDecl().bind("var"), this);
}

void CudaApiCheck::check(const MatchFinder::MatchResult &Result) {
  if (const auto *Var = Result.Nodes.getNodeAs<VarDecl>("var")) {
    if (!Context.isEditable(Var->getLocation()))
      return;
    const QualType T = Var->getType();
    if (isClassOrDerived(T, "c10::cuda::CUDAStream") ||
        isClassOrDerived(T, "at::cuda::CUDAEvent") ||
        isClassOrDerived(T, "c10::cuda::CUDAStreamGuard"))
      warn(Var->getLocation(), "CUDA streams and events are left as they are; create them on "
                               "accelerator.device() so each process uses its own GPU");
    return;
  }
  const auto *Call = Result.Nodes.getNodeAs<CallExpr>("call");
  const auto *Fn = Result.Nodes.getNodeAs<FunctionDecl>("fn");
  if (!Context.isEditable(Call->getBeginLoc()))
    return;
  const std::string Qualified = Fn->getQualifiedNameAsString();
  const StringRef Name = plainName(Fn);
  if (Qualified == "torch::cuda::manual_seed" || Qualified == "torch::cuda::manual_seed_all") {
    warn(Call->getBeginLoc(),
         "torch::cuda::" + Name.str() +
             " is left as it is; seed every process with torch::manual_seed, or "
             "AcceleratorOptions().seed(...), so CPU and GPU generators agree across processes");
    return;
  }
  if ((StringRef(Qualified).startswith("c10::cuda::") ||
       StringRef(Qualified).startswith("at::cuda::")) &&
      (Name.contains("Stream") || Name.contains("Event"))) {
    warn(Call->getBeginLoc(), "CUDA streams and events are left as they are; create them on "
                              "accelerator.device() so each process uses its own GPU");
    return;
  }
  // The CUDA runtime API: cudaMalloc, cudaMemcpy, cudaSetDevice, ...
  if (Fn->getDeclContext()->getRedeclContext()->isTranslationUnit() && Name.startswith("cuda") &&
      Name.size() > 4 && isUppercase(Name[4]))
    warn(Call->getBeginLoc(), "raw CUDA runtime call '" + Name.str() +
                                  "' is left as it is; it must use this process's GPU "
                                  "(accelerator.device().index()), not a fixed one");
}

} // namespace accel::migrate
