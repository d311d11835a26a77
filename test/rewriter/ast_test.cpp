// Unit tests of accel-migrate's parts that read a parsed program, on code held in memory: the text
// around statements (SourceText) and where the Accelerator must be reachable (AcceleratorReach).

#include "AcceleratorReach.h"
#include "ProgramFacts.h"
#include "SourceText.h"

#include "clang/ASTMatchers/ASTMatchFinder.h"
#include "clang/ASTMatchers/ASTMatchers.h"
#include "clang/Frontend/ASTUnit.h"
#include "clang/Tooling/Tooling.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace accel::migrate {
namespace {

using namespace clang::ast_matchers;

// Outside any folder with a .clang-format, so the style is the one derived from the code.
constexpr const char* kFileName = "/accel-unit-test/input.cc";

std::unique_ptr<clang::ASTUnit> parse(const std::string& Code) {
  auto Unit = clang::tooling::buildASTFromCodeWithArgs(Code, {"-std=c++17"}, kFileName);
  EXPECT_TRUE(Unit != nullptr);
  EXPECT_FALSE(Unit->getDiagnostics().hasErrorOccurred()) << Code;
  return Unit;
}

/// The statement declaring the variable Name.
const clang::DeclStmt* declarationOf(clang::ASTUnit& Unit, const std::string& Name) {
  const auto Found = match(declStmt(has(varDecl(hasName(Name)))).bind("s"), Unit.getASTContext());
  EXPECT_EQ(Found.size(), 1u) << Name;
  return Found.empty() ? nullptr : Found[0].getNodeAs<clang::DeclStmt>("s");
}

unsigned offsetOf(clang::ASTUnit& Unit, clang::SourceLocation Loc) {
  return Unit.getSourceManager().getFileOffset(Loc);
}

SourceText sourceOf(clang::ASTUnit& Unit) {
  return SourceText(Unit.getSourceManager(), Unit.getASTContext().getLangOpts());
}

TEST(SourceText, ReadsTheLinesAroundAStatement) {
  const std::string Code =
      "int f(int a) {\n"
      "    int b = a;\n"
      "    return b;\n"
      "}\n";
  auto Unit = parse(Code);
  const SourceText Source = sourceOf(*Unit);
  const auto* B = declarationOf(*Unit, "b");
  ASSERT_NE(B, nullptr);
  EXPECT_EQ(Source.text(B->getSourceRange()), "int b = a;");
  EXPECT_EQ(Source.indentation(B->getBeginLoc()), "    ");
  EXPECT_EQ(Source.indentStep(B->getBeginLoc()), "    ");
  const unsigned AfterSemicolon = Code.find("a;") + 2;
  EXPECT_EQ(offsetOf(*Unit, Source.afterStatement(B)), AfterSemicolon);
  // From `return`, back over the newline and indentation to just past the previous statement.
  const auto Return = B->getBeginLoc().getLocWithOffset(Code.find("return") - Code.find("int b"));
  EXPECT_EQ(offsetOf(*Unit, Source.afterPreviousToken(Return)), AfterSemicolon);
  EXPECT_EQ(Source.pathOf(B->getBeginLoc()), kFileName);
}

TEST(SourceText, TabsAreOneStepAndAFlatFileGetsTwoSpaces) {
  auto Tabs = parse("int f() {\n\tint t = 0;\n\treturn t;\n}\n");
  EXPECT_EQ(sourceOf(*Tabs).indentStep(declarationOf(*Tabs, "t")->getBeginLoc()), "\t");
  auto Flat = parse("int g = 0;\n");
  const auto* G =
      match(varDecl(hasName("g")).bind("v"), Flat->getASTContext())[0].getNodeAs<clang::VarDecl>(
          "v");
  EXPECT_EQ(sourceOf(*Flat).indentStep(G->getBeginLoc()), "  ");
}

TEST(SourceText, ReferencesAreDeclaredAsTheFileWritesThem) {
  auto Left = parse("void g(int& a, int& b) { a = b; }\n");
  auto Right = parse("void g(int &a, int &b) { a = b; }\n");
  for (auto* Unit : {Left.get(), Right.get()}) {
    const auto Loc =
        Unit->getSourceManager().getLocForStartOfFile(Unit->getSourceManager().getMainFileID());
    const std::string Expected =
        Unit == Left.get() ? "accel::Accelerator& accelerator" : "accel::Accelerator &accelerator";
    EXPECT_EQ(sourceOf(*Unit).referenceDeclaration(Loc, "accel::Accelerator", "accelerator"),
              Expected);
  }
}

class AcceleratorReachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Unit = parse(
        "struct Trainer {\n"
        "  Trainer() : rate([] { int i = 0; return i; }()) {}\n"
        "  int step() { int s = 0; return s; }\n"
        "  int rate;\n"
        "  int later = [] { int d = 0; return d; }();\n"
        "};\n"
        "int helper() { int h = 0; return h; }\n"
        "int byCopy() { auto f = [=] { int c = 0; return c; }; return f(); }\n"
        "int byReference() { auto f = [&] { int r = 0; return r; }; return f(); }\n"
        "int before = [] { int g = 0; return g; }();\n"
        "int main() { int m = helper(); return m; }\n");
    auto& SM = Unit->getSourceManager();
    Facts.analyze(Unit->getASTContext(),
                  [&SM](clang::SourceLocation Loc) { return SM.isInMainFile(Loc); });
    Reach = std::make_unique<AcceleratorReach>(Unit->getASTContext(), Facts);
  }
  std::string reachFrom(const std::string& Variable, std::string& Why) {
    return Reach->accelerator(declarationOf(*Unit, Variable), Why);
  }
  std::vector<std::string> binding() const {
    std::vector<std::string> Names;
    for (const clang::FunctionDecl* Fn : Reach->functionsNeedingAccelerator())
      Names.push_back(Fn->getNameAsString());
    return Names;
  }

  std::unique_ptr<clang::ASTUnit> Unit;
  ProgramFacts Facts;
  std::unique_ptr<AcceleratorReach> Reach;
};

TEST_F(AcceleratorReachTest, MainHasItAndOtherFunctionsBindTheProcesss) {
  std::string Why;
  EXPECT_EQ(reachFrom("m", Why), "accelerator");
  EXPECT_TRUE(Reach->hostNeedsAccelerator());
  EXPECT_TRUE(Reach->functionsNeedingAccelerator().empty());

  EXPECT_EQ(reachFrom("h", Why), "accelerator");
  EXPECT_EQ(binding(), std::vector<std::string>{"helper"});
  EXPECT_TRUE(Why.empty());
}

TEST_F(AcceleratorReachTest, AMethodBindsItInItsOwnBodyNotThroughAMember) {
  std::string Why;
  EXPECT_EQ(reachFrom("s", Why), "accelerator");
  EXPECT_EQ(binding(), std::vector<std::string>{"step"});
}

TEST_F(AcceleratorReachTest, ALambdaByCopyBindsItsOwnAndByReferenceSharesItsFunctions) {
  std::string Why;
  EXPECT_EQ(reachFrom("c", Why), "accelerator");
  EXPECT_EQ(binding(), std::vector<std::string>{"operator()"});
  EXPECT_TRUE(Why.empty());

  EXPECT_EQ(reachFrom("r", Why), "accelerator");
  // The function around the lambda binds it; the lambda sees it by reference.
  EXPECT_EQ(binding(), (std::vector<std::string>{"operator()", "byReference"}));
  EXPECT_TRUE(Why.empty());
}

TEST_F(AcceleratorReachTest, InitializersOutsideABodyCallTheProcesssAndNamespaceScopeIsRefused) {
  std::string Why;
  // The expressions of a member initializer and a default member initializer have no body to
  // bind in: they call the process's Accelerator where they are.
  // (Clang 14's parent map goes from an initializer's expression to the constructor.)
  const auto InInitializer =
      match(lambdaExpr(hasAncestor(cxxConstructorDecl())).bind("l"), Unit->getASTContext());
  ASSERT_EQ(InInitializer.size(), 1u);
  EXPECT_EQ(Reach->accelerator(InInitializer[0].getNodeAs<clang::LambdaExpr>("l"), Why),
            AcceleratorReach::CurrentAccelerator);
  const auto InClass =
      match(lambdaExpr(hasAncestor(fieldDecl(hasName("later")))).bind("l"), Unit->getASTContext());
  ASSERT_EQ(InClass.size(), 1u);
  EXPECT_EQ(Reach->accelerator(InClass[0].getNodeAs<clang::LambdaExpr>("l"), Why),
            AcceleratorReach::CurrentAccelerator);
  EXPECT_TRUE(Reach->functionsNeedingAccelerator().empty());
  EXPECT_TRUE(Why.empty());

  // Inside those lambdas' own bodies, the lambda binds it.
  EXPECT_EQ(reachFrom("i", Why), "accelerator");
  EXPECT_EQ(reachFrom("d", Why), "accelerator");
  EXPECT_EQ(Reach->functionsNeedingAccelerator().size(), 2u);

  // A namespace-scope initializer runs before main creates the Accelerator: refused, said why.
  const auto Global =
      match(lambdaExpr(hasAncestor(varDecl(hasName("before")))).bind("l"), Unit->getASTContext());
  ASSERT_EQ(Global.size(), 1u);
  EXPECT_EQ(Reach->accelerator(Global[0].getNodeAs<clang::LambdaExpr>("l"), Why), "");
  EXPECT_NE(Why.find("before main creates the accelerator"), std::string::npos) << Why;
}

TEST_F(AcceleratorReachTest, WhereAStatementSits) {
  const auto* R = declarationOf(*Unit, "r");
  const auto* Lambda = Reach->enclosingFunction(R);
  ASSERT_NE(Lambda, nullptr);
  EXPECT_TRUE(llvm::isa<clang::CXXMethodDecl>(Lambda));
  EXPECT_TRUE(llvm::cast<clang::CXXMethodDecl>(Lambda)->getParent()->isLambda());
  // The initializer of `int m = helper();` sits in its declaration statement.
  const auto* M = declarationOf(*Unit, "m");
  const auto* Init = llvm::cast<clang::VarDecl>(M->getSingleDecl())->getInit();
  EXPECT_EQ(Reach->parentStmt(Init), M);
  EXPECT_EQ(Reach->enclosingFunction(M)->getName(), "main");
}

}  // namespace
}  // namespace accel::migrate
