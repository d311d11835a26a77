#pragma once

// Worker threads for a prepared data loader, with LibTorch's semantics for `workers` and
// `max_jobs`: each worker reads from its own copy of the dataset, at most `max_jobs` batches are
// requested ahead of the one being consumed, and batches are handed out in the order they were
// planned whatever order the workers finish in (LibTorch's enforce_ordering).

#include <c10/util/Exception.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace accel {
namespace detail {

template <typename Dataset>
class BatchPrefetcher {
 public:
  using Batch = typename Dataset::BatchType;

  BatchPrefetcher(const Dataset& dataset, size_t workers, size_t max_jobs)
      : max_jobs_(std::max<size_t>(max_jobs, 1)) {
    for (size_t w = 0; w < workers; ++w) {
      threads_.emplace_back([this, copy = Dataset(dataset)]() mutable { work(copy); });
    }
  }
  ~BatchPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    jobs_ready_.notify_all();
    for (auto& thread : threads_) thread.join();
  }
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  /// Starts reading `plan` from batch `first`; what an earlier start still has in flight is
  /// dropped (a loop left early, a resumed epoch).
  void start(std::vector<std::vector<size_t>> plan, size_t first) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++generation_;
      jobs_.clear();
      results_.clear();
      plan_ = std::move(plan);
      next_request_ = first;
      while (next_request_ < plan_.size() && next_request_ < first + max_jobs_) enqueue_next();
    }
    jobs_ready_.notify_all();
  }

  /// Batch `position` of the plan, waiting for its worker; a worker's exception is rethrown here.
  /// Taking it requests the next batch beyond the window.
  Batch take(size_t position) {
    std::unique_lock<std::mutex> lock(mutex_);
    TORCH_CHECK(position < plan_.size(), "accel: batch ", position, " is past the epoch's plan");
    result_ready_.wait(lock, [&] { return results_.count(position) > 0; });
    Result result = std::move(results_.at(position));
    results_.erase(position);
    if (next_request_ < plan_.size()) {
      enqueue_next();
      lock.unlock();
      jobs_ready_.notify_one();
    } else {
      lock.unlock();
    }
    if (result.error) std::rethrow_exception(result.error);
    return std::move(*result.batch);
  }

 private:
  struct Job {
    uint64_t generation;
    size_t position;
    std::vector<size_t> indices;
  };
  struct Result {
    std::optional<Batch> batch;
    std::exception_ptr error;
  };

  void enqueue_next() {  // with mutex_ held
    jobs_.push_back(Job{generation_, next_request_, plan_[next_request_]});
    ++next_request_;
  }

  void work(Dataset& dataset) {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        jobs_ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Result result;
      try {
        result.batch = dataset.get_batch(std::move(job.indices));
      } catch (...) {
        result.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (job.generation != generation_) continue;  // its epoch was abandoned
        results_.emplace(job.position, std::move(result));
      }
      result_ready_.notify_all();
    }
  }

  const size_t max_jobs_;
  std::mutex mutex_;
  std::condition_variable jobs_ready_;
  std::condition_variable result_ready_;
  std::deque<Job> jobs_;
  std::map<size_t, Result> results_;
  std::vector<std::vector<size_t>> plan_;
  size_t next_request_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;  // last: they start after every member they use exists
};

}  // namespace detail
}  // namespace accel
