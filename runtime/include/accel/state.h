#pragma once

// The process's place in the job without an Accelerator (Accelerate's PartialState), for code
// that must not be handed one: a model's own save() method guards its torch::save with
// `accel::state().is_main_process()` and keeps its constructor and signature.

#include <cstdint>

namespace accel {

/// Where this process stands in the job, as the launcher (or torchrun, SLURM, MPI) says. Read
/// once, on first use; it needs no process group and communicates nothing.
class ProcessState {
 public:
  /// This process's rank in the job (0 for a plainly started program).
  int64_t process_index() const { return process_index_; }
  /// Its rank on this machine.
  int64_t local_process_index() const { return local_process_index_; }
  /// The job's number of processes.
  int64_t num_processes() const { return num_processes_; }
  bool is_main_process() const { return process_index_ == 0; }
  bool is_local_main_process() const { return local_process_index_ == 0; }
  bool is_last_process() const { return process_index_ == num_processes_ - 1; }

 private:
  friend const ProcessState& state();
  int64_t process_index_ = 0;
  int64_t local_process_index_ = 0;
  int64_t num_processes_ = 1;
};

/// The process's state. Throws c10::Error naming the variable when the environment is malformed.
///
/// Example:
///   void ConvNetImpl::save(const std::string& path) {
///     if (accel::state().is_main_process()) torch::save(shared_from_this(), path);
///   }
const ProcessState& state();

}  // namespace accel
