// Deterministic parallel-for over task indices (STYLE habit 8). Work is split by whole
// tasks (groups or fixed blocks), each task writes only its own outputs, and partial
// results are combined by the caller in task order, so results never depend on the
// thread count. An exception thrown by a task is captured and rethrown on the caller
// (the one from the lowest-numbered failing task, so the error is deterministic too).
#pragma once

#include <cstdint>
#include <functional>

namespace qobs::kernels {

/// Threads to use: `requested` if > 0, else QOBS_NUM_THREADS if set (> 0), else the
/// hardware concurrency (at least 1).
int resolve_num_threads(int requested);

/// Runs body(task, worker) for task in [0, num_tasks) on up to `num_threads` threads
/// (worker in [0, num_threads)). Tasks are handed out dynamically in increasing order;
/// with one thread (or one task) everything runs on the caller.
void parallel_for(int64_t num_tasks, int num_threads, const std::function<void(int64_t task, int worker)>& body);

}  // namespace qobs::kernels
