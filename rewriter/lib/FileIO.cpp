//===- FileIO.cpp ---------------------------------------------------------------------------===//
#include "FileIO.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <unistd.h>

namespace accel::migrate {

namespace {
llvm::Error fileError(llvm::StringRef Path, const llvm::Twine &What, std::error_code EC) {
  return llvm::createStringError(EC, "%s: %s: %s", Path.str().c_str(), What.str().c_str(),
                                 EC.message().c_str());
}
} // namespace

std::string absolutePath(llvm::StringRef Path) {
  llvm::SmallString<256> Abs(Path);
  llvm::sys::fs::make_absolute(Abs);
  llvm::sys::path::remove_dots(Abs, true);
  llvm::SmallString<256> Real;
  if (!llvm::sys::fs::real_path(Abs, Real))
    return std::string(Real);
  return std::string(Abs);
}

llvm::Expected<std::string> readFile(llvm::StringRef Path) {
  auto Buffer =
      llvm::MemoryBuffer::getFile(Path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!Buffer)
    return fileError(Path, "cannot read", Buffer.getError());
  return (*Buffer)->getBuffer().str();
}

llvm::Error checkWritable(llvm::StringRef Path) {
  if (llvm::sys::fs::exists(Path)) {
    if (std::error_code EC = llvm::sys::fs::access(Path, llvm::sys::fs::AccessMode::Write))
      return fileError(Path, "cannot write", EC);
  }
  llvm::SmallString<256> Dir(Path);
  llvm::sys::path::remove_filename(Dir);
  if (Dir.empty())
    Dir = ".";
  if (std::error_code EC = llvm::sys::fs::access(Dir, llvm::sys::fs::AccessMode::Write))
    return fileError(Path, "cannot create a file in its directory", EC);
  return llvm::Error::success();
}

llvm::Error writeFileAtomically(llvm::StringRef Path, llvm::StringRef Content) {
  llvm::SmallString<256> Model(Path);
  Model += ".accel-migrate-%%%%%%%%";
  int FD = -1;
  llvm::SmallString<256> TempPath;
  if (std::error_code EC = llvm::sys::fs::createUniqueFile(Model, FD, TempPath))
    return fileError(Path, "cannot create a temporary file beside it", EC);
  auto Cleanup = [&] { llvm::sys::fs::remove(TempPath); };
  {
    llvm::raw_fd_ostream Out(FD, /*shouldClose=*/false);
    Out << Content;
    Out.flush();
    if (Out.has_error()) {
      const std::error_code EC = Out.error();
      Out.clear_error();
      ::close(FD);
      Cleanup();
      return fileError(Path, "cannot write the temporary file", EC);
    }
  }
  if (::fsync(FD) != 0 || ::close(FD) != 0) {
    const std::error_code EC(errno, std::generic_category());
    Cleanup();
    return fileError(Path, "cannot flush the temporary file", EC);
  }
  // Keep the original's permissions (a new file keeps the temporary's, 0600 masked by umask:
  // give it the usual 0644 instead).
  llvm::sys::fs::file_status Status;
  const llvm::sys::fs::perms Perms =
      llvm::sys::fs::status(Path, Status) ? llvm::sys::fs::perms(0644) : Status.permissions();
  if (std::error_code EC = llvm::sys::fs::setPermissions(TempPath, Perms)) {
    Cleanup();
    return fileError(Path, "cannot set permissions", EC);
  }
  if (std::error_code EC = llvm::sys::fs::rename(TempPath, Path)) {
    Cleanup();
    return fileError(Path, "cannot replace the file", EC);
  }
  return llvm::Error::success();
}

} // namespace accel::migrate
