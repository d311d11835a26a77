//===- TorchPatterns.h - Recognising LibTorch and libaccel types and idioms ---------*- C++ -*-===//
//
// Every question "is this a model / optimizer / tensor / device?" is answered here, by the
// declaration the type resolves to, so the checks read as the transformation they perform.
//
//===----------------------------------------------------------------------------------------===//
#pragma once

#include "clang/AST/Decl.h"
#include "clang/AST/DeclCXX.h"
#include "clang/AST/Expr.h"
#include "clang/AST/Type.h"

namespace accel::migrate {

/// D's name when it is a plain identifier; empty for operators, constructors, destructors and
/// conversions (whose getName() asserts).
inline llvm::StringRef plainName(const clang::NamedDecl *D) {
  return D && D->getDeclName().isIdentifier() ? D->getName() : llvm::StringRef();
}

/// True for T (through references, const and typedefs) naming the class QualifiedName or one
/// derived from it. Class templates match by their template's name ("torch::nn::ModuleHolder").
bool isClassOrDerived(clang::QualType T, llvm::StringRef QualifiedName);

bool isTensor(clang::QualType T); ///< at::Tensor (torch::Tensor)
bool isModule(clang::QualType T); ///< Module-derived struct, ModuleHolder, smart or raw pointer
/// LibTorch's loss modules (torch::nn::CrossEntropyLoss, MSELossImpl, ...): modules without
/// parameters, which a training step calls but no optimizer trains.
bool isLossModule(clang::QualType T);
bool isOptimizer(clang::QualType T); ///< derived from torch::optim::Optimizer
/// A raw, unique or shared pointer to an optimizer (`torch::optim::Adam* optimizer`).
bool isOptimizerPointer(clang::QualType T);
/// std::shared_ptr or std::unique_ptr.
bool isStdSmartPointer(clang::QualType T);
/// An optimizer held by value or by pointer.
inline bool isOptimizerOrPointer(clang::QualType T) {
  return isOptimizer(T) || isOptimizerPointer(T);
}
bool isScheduler(clang::QualType T);   ///< derived from torch::optim::LRScheduler
bool isDataLoader(clang::QualType T);  ///< a torch or accel data loader, or a pointer to one
bool isDevice(clang::QualType T);      ///< c10::Device
bool isDeviceKind(clang::QualType T);  ///< c10::DeviceType
bool isAccelerator(clang::QualType T); ///< accel::Accelerator
/// A method of accel::Accelerator, its own or one of those it inherits from accel::detail.
bool isAcceleratorMethod(const clang::CXXMethodDecl *Method);
bool isStringLike(clang::QualType T); ///< std::string, string_view, char pointer or array

/// Strips implicit nodes, parentheses, `*p` and `p->` / `p.operator->()` down to the variable an
/// expression is about, or null. `*loader`, `model->`, `batch.data` give loader, model, batch.
const clang::ValueDecl *rootDecl(const clang::Expr *E);

/// True when E mentions CUDA: kCUDA, DeviceType::CUDA, torch::cuda::is_available(), a "cuda..."
/// string literal, or a local DeviceType variable that is assigned one of those in Fn.
bool mentionsCuda(const clang::Expr *E, const clang::FunctionDecl *Fn);

/// Calls to a method of libaccel's Accelerator named Name inside S (any of Names when empty).
bool containsAcceleratorCall(const clang::Stmt *S, llvm::StringRef Name = "");

/// A call of an accel::Accelerator method; of the one called Name when Name is given.
bool isAcceleratorMethodCall(const clang::CallExpr *CE, llvm::StringRef Name = "");

/// A constructor the program wrote to build an object from its arguments: not implicit, not a
/// copy or move constructor, not deleted.
bool isWrittenConstructor(const clang::CXXConstructorDecl *Ctor);

/// True for a call to at::Tensor::backward or Accelerator::backward anywhere in S.
bool containsBackward(const clang::Stmt *S);

/// True when S trains: it calls backward or an optimizer's step, itself or through the
/// functions it calls (followed a few calls deep). A method whose body this translation unit does
/// not see counts when its class holds an optimizer and its name says it trains (`Step`,
/// `train_batch`, `fit`, `update`).
bool containsTrainingStep(const clang::Stmt *S);

/// The first call to torch::data::make_data_loader inside E, or null.
const clang::CallExpr *findMakeDataLoaderCall(const clang::Expr *E);

/// The function a template instantiation was instantiated from (or F itself).
const clang::FunctionDecl *patternOf(const clang::FunctionDecl *F);

} // namespace accel::migrate
