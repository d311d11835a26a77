//===- TorchPatterns.cpp --------------------------------------------------------------------===//
#include "TorchPatterns.h"

#include "clang/AST/DeclCXX.h"
#include "clang/AST/DeclTemplate.h"
#include "clang/AST/ExprCXX.h"
#include "clang/AST/RecursiveASTVisitor.h"

using namespace clang;

namespace accel::migrate {

namespace {

const CXXRecordDecl *recordOf(QualType T) {
  if (T.isNull())
    return nullptr;
  T = T.getNonReferenceType().getCanonicalType();
  if (const auto *RD = T->getAsCXXRecordDecl())
    return RD;
  return nullptr;
}

std::string qualifiedName(const CXXRecordDecl *RD) {
  if (const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD))
    return Spec->getSpecializedTemplate()->getQualifiedNameAsString();
  return RD->getQualifiedNameAsString();
}

// The class a base specifier names: a record, or in a template's own definition, the template a
// dependent base names (DataLoaderBase<Dataset, Batch, Request>).
const CXXRecordDecl *baseClass(QualType T) {
  if (const CXXRecordDecl *RD = recordOf(T))
    return RD;
  if (const auto *Spec = T->getAs<TemplateSpecializationType>())
    if (const auto *Template =
            dyn_cast_or_null<ClassTemplateDecl>(Spec->getTemplateName().getAsTemplateDecl()))
      return Template->getTemplatedDecl();
  return nullptr;
}

// Where the bases of RD are written. A class template specialization nothing has needed complete
// yet (a data loader only returned by pointer) has no definition of its own: its template's
// definition names the same bases. Whether the parse happened to instantiate it (with a cached
// preamble LibTorch's function bodies are not instantiated) does not change the answer.
const CXXRecordDecl *definitionOf(const CXXRecordDecl *RD) {
  if (RD->hasDefinition())
    return RD->getDefinition();
  const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(RD);
  if (!Spec)
    return nullptr;
  const auto From = Spec->getSpecializedTemplateOrPartial();
  const CXXRecordDecl *Pattern = From.is<ClassTemplatePartialSpecializationDecl *>()
                                     ? From.get<ClassTemplatePartialSpecializationDecl *>()
                                     : From.get<ClassTemplateDecl *>()->getTemplatedDecl();
  return Pattern && Pattern->hasDefinition() ? Pattern->getDefinition() : nullptr;
}

bool derivesFrom(const CXXRecordDecl *RD, StringRef Name, unsigned Depth = 0) {
  if (!RD || Depth > 16)
    return false;
  if (qualifiedName(RD) == Name)
    return true;
  const CXXRecordDecl *Definition = definitionOf(RD);
  if (!Definition)
    return false;
  for (const CXXBaseSpecifier &Base : Definition->bases())
    if (derivesFrom(baseClass(Base.getType()), Name, Depth + 1))
      return true;
  return false;
}

// The first template argument of a class template specialization (shared_ptr<T> -> T).
QualType firstTemplateArg(QualType T) {
  const auto *Spec = dyn_cast_or_null<ClassTemplateSpecializationDecl>(recordOf(T));
  if (!Spec || Spec->getTemplateArgs().size() == 0)
    return {};
  const TemplateArgument &Arg = Spec->getTemplateArgs()[0];
  return Arg.getKind() == TemplateArgument::Type ? Arg.getAsType() : QualType();
}

} // namespace

bool isStdSmartPointer(QualType T) {
  const auto *RD = recordOf(T);
  if (!RD || !RD->isInStdNamespace())
    return false;
  return RD->getName() == "shared_ptr" || RD->getName() == "unique_ptr";
}

bool isClassOrDerived(QualType T, StringRef QualifiedName) {
  return derivesFrom(recordOf(T), QualifiedName);
}

bool isTensor(QualType T) { return isClassOrDerived(T, "at::Tensor"); }

bool isModule(QualType T) {
  if (isClassOrDerived(T, "torch::nn::Module") || isClassOrDerived(T, "torch::nn::ModuleHolder"))
    return true;
  // `ConvNet* model = new ConvNet(10)`: the runtime takes a raw pointer to a module or a holder.
  if (!T.isNull() && T.getNonReferenceType()->isPointerType()) {
    const QualType Pointee = T.getNonReferenceType()->getPointeeType();
    return isClassOrDerived(Pointee, "torch::nn::Module") ||
           isClassOrDerived(Pointee, "torch::nn::ModuleHolder");
  }
  return isStdSmartPointer(T) && isClassOrDerived(firstTemplateArg(T), "torch::nn::Module");
}

bool isLossModule(QualType T) {
  if (T.isNull())
    return false;
  const auto *Record = T.getNonReferenceType()->getAsCXXRecordDecl();
  if (!Record)
    return false;
  const std::string Name = Record->getQualifiedNameAsString();
  // torch::nn::CrossEntropyLoss (a ModuleHolder) or its CrossEntropyLossImpl.
  return llvm::StringRef(Name).startswith("torch::nn::") &&
         (llvm::StringRef(Name).endswith("Loss") || llvm::StringRef(Name).endswith("LossImpl"));
}

bool isOptimizer(QualType T) { return isClassOrDerived(T, "torch::optim::Optimizer"); }

bool isOptimizerPointer(QualType T) {
  if (T.isNull())
    return false;
  if (T.getNonReferenceType()->isPointerType())
    return isOptimizer(T.getNonReferenceType()->getPointeeType());
  return isStdSmartPointer(T) && isOptimizer(firstTemplateArg(T));
}
bool isScheduler(QualType T) { return isClassOrDerived(T, "torch::optim::LRScheduler"); }

bool isDataLoader(QualType T) {
  if (isClassOrDerived(T, "torch::data::DataLoaderBase") ||
      isClassOrDerived(T, "accel::DataLoader"))
    return true;
  return isStdSmartPointer(T) && isDataLoader(firstTemplateArg(T));
}

bool isDevice(QualType T) { return isClassOrDerived(T, "c10::Device"); }

bool isDeviceKind(QualType T) {
  if (T.isNull())
    return false;
  const auto *ET = T.getNonReferenceType().getCanonicalType()->getAs<EnumType>();
  return ET && ET->getDecl()->getQualifiedNameAsString() == "c10::DeviceType";
}

bool isAccelerator(QualType T) { return isClassOrDerived(T, "accel::Accelerator"); }

bool isAcceleratorMethod(const CXXMethodDecl *Method) {
  if (!Method)
    return false;
  const CXXRecordDecl *Class = Method->getParent();
  if (isAccelerator(QualType(Class->getTypeForDecl(), 0)))
    return true;
  // The groups of methods Accelerator inherits: accel::detail::ProcessControl<Accelerator>,
  // CollectiveMethods<Accelerator> and DataLoaderPreparation<Accelerator>.
  const auto *Spec = dyn_cast<ClassTemplateSpecializationDecl>(Class);
  if (!Spec || Spec->getTemplateArgs().size() == 0)
    return false;
  const TemplateArgument &Arg = Spec->getTemplateArgs()[0];
  return Arg.getKind() == TemplateArgument::Type && isAccelerator(Arg.getAsType()) &&
         StringRef(Spec->getQualifiedNameAsString()).startswith("accel::detail::");
}

bool isStringLike(QualType T) {
  if (T.isNull())
    return false;
  T = T.getNonReferenceType().getCanonicalType();
  if (T->isPointerType() || T->isArrayType()) {
    QualType Elem =
        T->isPointerType() ? T->getPointeeType() : QualType(T->getArrayElementTypeNoTypeQual(), 0);
    return Elem->isCharType();
  }
  const auto *RD = recordOf(T);
  return RD && RD->isInStdNamespace() &&
         (RD->getName() == "basic_string" || RD->getName() == "basic_string_view");
}

const ValueDecl *rootDecl(const Expr *E) {
  for (unsigned Guard = 0; E && Guard < 32; ++Guard) {
    E = E->IgnoreParenImpCasts();
    if (const auto *DRE = dyn_cast<DeclRefExpr>(E))
      return DRE->getDecl();
    if (const auto *ME = dyn_cast<MemberExpr>(E)) {
      // A member of this object (`model_`, `this->model_`) is its own root.
      if (isa<CXXThisExpr>(ME->getBase()->IgnoreParenImpCasts()))
        return ME->getMemberDecl();
      E = ME->getBase();
      continue;
    }
    if (const auto *UO = dyn_cast<UnaryOperator>(E)) {
      if (UO->getOpcode() != UO_Deref)
        return nullptr;
      E = UO->getSubExpr();
      continue;
    }
    if (const auto *Op = dyn_cast<CXXOperatorCallExpr>(E)) {
      const auto Kind = Op->getOperator();
      if ((Kind == OO_Arrow || Kind == OO_Star || Kind == OO_Subscript) && Op->getNumArgs() >= 1) {
        E = Op->getArg(0);
        continue;
      }
      return nullptr;
    }
    if (const auto *MC = dyn_cast<CXXMemberCallExpr>(E)) {
      // ModuleHolder::operator-> / ptr() / get(): still the same object.
      const auto *MD = MC->getMethodDecl();
      if (MD && (plainName(MD) == "ptr" || plainName(MD) == "get")) {
        E = MC->getImplicitObjectArgument();
        continue;
      }
      return nullptr;
    }
    if (const auto *Construct = dyn_cast<CXXConstructExpr>(E)) {
      if (Construct->getNumArgs() == 1 && Construct->getConstructor()->isCopyOrMoveConstructor()) {
        E = Construct->getArg(0);
        continue;
      }
      return nullptr;
    }
    if (const auto *Temp = dyn_cast<MaterializeTemporaryExpr>(E)) {
      E = Temp->getSubExpr();
      continue;
    }
    // A copy passed by value (`train(model)` to `train(std::shared_ptr<Net> model)`): the
    // temporary's copy is bound for destruction, and still points at the same module.
    if (const auto *Bound = dyn_cast<CXXBindTemporaryExpr>(E)) {
      E = Bound->getSubExpr();
      continue;
    }
    return nullptr;
  }
  return nullptr;
}

namespace {

class CudaFinder : public RecursiveASTVisitor<CudaFinder> {
public:
  explicit CudaFinder(const FunctionDecl *Fn, unsigned Depth) : Fn(Fn), Depth(Depth) {}
  bool Found = false;

  bool VisitDeclRefExpr(DeclRefExpr *DRE) {
    const ValueDecl *D = DRE->getDecl();
    const std::string Name = D->getQualifiedNameAsString();
    if (Name == "c10::kCUDA" || Name == "c10::DeviceType::CUDA" || Name == "torch::kCUDA" ||
        Name == "at::kCUDA")
      Found = true;
    else if (const auto *VD = dyn_cast<VarDecl>(D);
             VD && VD->hasLocalStorage() && isDeviceKind(VD->getType()) && Depth < 4)
      Found = Found || localKindIsCuda(VD);
    return !Found;
  }
  bool VisitCallExpr(CallExpr *CE) {
    if (const FunctionDecl *Callee = CE->getDirectCallee()) {
      const std::string Name = Callee->getQualifiedNameAsString();
      if (Name == "torch::cuda::is_available" || Name == "at::cuda::is_available")
        Found = true;
    }
    return !Found;
  }
  bool VisitStringLiteral(StringLiteral *S) {
    if (S->getCharByteWidth() == 1 && S->getString().startswith("cuda"))
      Found = true;
    return !Found;
  }

private:
  // A DeviceType local is CUDA-ish when its initializer or any assignment to it in Fn is.
  bool localKindIsCuda(const VarDecl *VD) {
    if (VD->getInit() && mentions(VD->getInit()))
      return true;
    if (!Fn || !Fn->getBody())
      return false;
    struct AssignFinder : RecursiveASTVisitor<AssignFinder> {
      const VarDecl *Var;
      std::vector<const Expr *> Values;
      bool VisitBinaryOperator(BinaryOperator *BO) {
        if (BO->getOpcode() == BO_Assign)
          if (const auto *DRE = dyn_cast<DeclRefExpr>(BO->getLHS()->IgnoreParenImpCasts()))
            if (DRE->getDecl() == Var)
              Values.push_back(BO->getRHS());
        return true;
      }
    } Assigns;
    Assigns.Var = VD;
    Assigns.TraverseStmt(Fn->getBody());
    for (const Expr *Value : Assigns.Values)
      if (mentions(Value))
        return true;
    return false;
  }
  bool mentions(const Expr *E) {
    CudaFinder Inner(Fn, Depth + 1);
    Inner.TraverseStmt(const_cast<Expr *>(E));
    return Inner.Found;
  }

  const FunctionDecl *Fn;
  unsigned Depth;
};

class CallFinder : public RecursiveASTVisitor<CallFinder> {
public:
  explicit CallFinder(std::function<bool(const CallExpr *)> Pred) : Pred(std::move(Pred)) {}
  bool Found = false;
  bool VisitCallExpr(CallExpr *CE) {
    Found = Found || Pred(CE);
    return !Found;
  }
  // A lambda's body is not this statement's code.
  bool TraverseLambdaExpr(LambdaExpr *) { return true; }

private:
  std::function<bool(const CallExpr *)> Pred;
};

} // namespace

bool isAcceleratorMethodCall(const CallExpr *CE, StringRef Name) {
  const auto *MC = dyn_cast<CXXMemberCallExpr>(CE);
  if (!MC || !MC->getMethodDecl())
    return false;
  if (!isAcceleratorMethod(MC->getMethodDecl()))
    return false;
  return Name.empty() || plainName(MC->getMethodDecl()) == Name;
}

bool mentionsCuda(const Expr *E, const FunctionDecl *Fn) {
  if (!E)
    return false;
  CudaFinder Finder(Fn, 0);
  Finder.TraverseStmt(const_cast<Expr *>(E));
  return Finder.Found;
}

bool containsAcceleratorCall(const Stmt *S, StringRef Name) {
  CallFinder Finder([Name](const CallExpr *CE) { return isAcceleratorMethodCall(CE, Name); });
  Finder.TraverseStmt(const_cast<Stmt *>(S));
  return Finder.Found;
}

bool containsBackward(const Stmt *S) {
  CallFinder Finder([](const CallExpr *CE) {
    if (isAcceleratorMethodCall(CE, "backward"))
      return true;
    const auto *MC = dyn_cast<CXXMemberCallExpr>(CE);
    return MC && MC->getMethodDecl() && plainName(MC->getMethodDecl()) == "backward" &&
           isTensor(QualType(MC->getMethodDecl()->getParent()->getTypeForDecl(), 0));
  });
  Finder.TraverseStmt(const_cast<Stmt *>(S));
  return Finder.Found;
}

namespace {

bool holdsOptimizer(const CXXRecordDecl *Class) {
  return Class && Class->hasDefinition() &&
         llvm::any_of(Class->getDefinition()->fields(),
                      [](const FieldDecl *F) { return isOptimizer(F->getType()); });
}

bool namedLikeTraining(StringRef Name) {
  const std::string Lower = Name.lower();
  for (StringRef Word : {"step", "train", "fit", "update", "optimi", "backward"})
    if (StringRef(Lower).contains(Word))
      return true;
  return false;
}

bool trainsIn(const Stmt *S, unsigned Depth);

bool callTrains(const CallExpr *CE, unsigned Depth) {
  if (isAcceleratorMethodCall(CE, "backward"))
    return true;
  const FunctionDecl *Callee = CE->getDirectCallee();
  if (!Callee)
    return false;
  if (const auto *Method = dyn_cast<CXXMethodDecl>(Callee)) {
    const QualType Owner(Method->getParent()->getTypeForDecl(), 0);
    if ((plainName(Method) == "backward" && isTensor(Owner)) ||
        (plainName(Method) == "step" && isOptimizer(Owner)))
      return true;
  }
  const FunctionDecl *Definition = nullptr;
  if (patternOf(Callee)->hasBody(Definition))
    return Depth < 4 && !Definition->isInStdNamespace() &&
           trainsIn(Definition->getBody(), Depth + 1);
  const auto *Method = dyn_cast<CXXMethodDecl>(Callee);
  return Method && Method->getIdentifier() && holdsOptimizer(Method->getParent()) &&
         namedLikeTraining(Method->getName());
}

bool trainsIn(const Stmt *S, unsigned Depth) {
  CallFinder Finder([Depth](const CallExpr *CE) { return callTrains(CE, Depth); });
  Finder.TraverseStmt(const_cast<Stmt *>(S));
  return Finder.Found;
}

} // namespace

bool isWrittenConstructor(const CXXConstructorDecl *Ctor) {
  return !Ctor->isImplicit() && !Ctor->isCopyOrMoveConstructor() && !Ctor->isDeleted();
}

bool containsTrainingStep(const Stmt *S) { return S && trainsIn(S, 0); }

const CallExpr *findMakeDataLoaderCall(const Expr *E) {
  struct Finder : RecursiveASTVisitor<Finder> {
    const CallExpr *Found = nullptr;
    bool VisitCallExpr(CallExpr *CE) {
      const FunctionDecl *F = CE->getDirectCallee();
      if (F && F->getQualifiedNameAsString() == "torch::data::make_data_loader")
        Found = CE;
      return !Found;
    }
  } F;
  F.TraverseStmt(const_cast<Expr *>(E));
  return F.Found;
}

const FunctionDecl *patternOf(const FunctionDecl *F) {
  if (!F)
    return nullptr;
  if (const FunctionDecl *Pattern = F->getTemplateInstantiationPattern())
    return Pattern;
  return F;
}

} // namespace accel::migrate
