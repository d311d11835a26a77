// A program for the fault tests, started by `accel launch` or directly:
//   fault_worker throw-on-rank-1   rank 1 throws after joining; rank 0 waits at a barrier
//   fault_worker join               joins the process group and exits 0

#include <accel/accel.h>

#include <iostream>
#include <stdexcept>
#include <string>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  accel::Accelerator accelerator;
  if (mode == "throw-on-rank-1") {
    if (accelerator.process_index() == 1) throw std::runtime_error("injected failure on rank 1");
    accelerator.wait_for_everyone();  // never completes: rank 1 is gone
    return 0;
  }
  if (mode == "join") {
    accelerator.wait_for_everyone();
    std::cout << "joined as rank " << accelerator.process_index() << "\n";
    return 0;
  }
  std::cerr << "usage: fault_worker throw-on-rank-1|join\n";
  return 2;
}
