// Deterministic parallel-for over task indices, above the kernels (a kernel runs one
// task on one thread; the caller chooses the thread count). Work is split by whole
// tasks (groups or fixed blocks), each task writes only its own outputs, and partial
// results are combined by the caller in task order, so results never depend on the
// thread count. An exception thrown by a task is captured and rethrown on the caller
// (the one from the lowest-numbered failing task, so the error is deterministic too).
//
// One thread budget: a ThreadPool of T threads runs coarse tasks (the pipeline's
// layers, submit()), and every parallel_for called on one of its threads hands its
// tasks to the same T threads instead of starting its own, so nested parallelism
// (layers x kernels) never runs more than T threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qobs::kernels {

/// Threads to use: `requested` if > 0; else, on a ThreadPool's thread, the pool's size;
/// else QOBS_NUM_THREADS if set (> 0); else the hardware concurrency (at least 1).
int resolve_num_threads(int requested);

/// Runs body(task, worker) for task in [0, num_tasks) on up to `num_threads` threads
/// (worker in [0, num_threads), each index used by one thread at a time). Tasks are
/// handed out dynamically in increasing order; the caller runs tasks too, so with one
/// thread (or one task) everything runs on the caller. Called on a ThreadPool's thread,
/// the helpers are the pool's idle threads (none are started). Elsewhere the call gets
/// num_threads - 1 helpers of its own from a process-wide set of parked threads, started
/// when the set has too few idle ones and kept for the next call.
void parallel_for(int64_t num_tasks, int num_threads, const std::function<void(int64_t task, int worker)>& body);

namespace detail {
struct ParallelBatch;  // the state of one parallel_for call (thread_pool.cc)
}  // namespace detail

/// A fixed set of threads for one piece of work (one quantize_checkpoint call), so no
/// pool state outlives it. Thread-safe.
class ThreadPool {
 public:
  /// Starts `num_threads` (>= 1) threads.
  explicit ThreadPool(int num_threads);
  /// Runs the tasks still queued, then joins the threads.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  /// Queues `task` for one of the pool's threads; parallel_for calls inside it share the
  /// pool. The task must catch its own exceptions (hand them to the submitter, as the
  /// pipeline does per layer): like a std::thread's, an escaping one ends the program.
  void submit(std::function<void()> task);

 private:
  using Batch = detail::ParallelBatch;  // one parallel_for call made on a pool thread
  friend void parallel_for(int64_t, int, const std::function<void(int64_t, int)>&);

  void work();
  void run_batch(Batch& b);

  std::mutex mu_;
  std::condition_variable work_cv_;  // a task or a batch slot is available, or stop_
  std::condition_variable idle_cv_;  // a helper left a batch
  std::deque<std::function<void()>> queue_;
  std::deque<Batch*> batches_;  // open to helpers: tasks left and a free worker index
  bool stop_ = false;
  const int size_;
  std::vector<std::thread> threads_;
};

}  // namespace qobs::kernels
