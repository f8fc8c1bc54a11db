#include "kernels/parallel/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"

namespace qobs::kernels {

int resolve_num_threads(int requested) {
  if (requested > 0) return requested;
  if (const char* env = std::getenv("QOBS_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    QOBS_CHECK(end && *end == '\0' && v > 0 && v <= 4096, InvalidArgument, "QOBS_NUM_THREADS='", env,
               "': expected a positive integer");
    return static_cast<int>(v);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void parallel_for(int64_t num_tasks, int num_threads, const std::function<void(int64_t, int)>& body) {
  if (num_tasks <= 0) return;
  const int workers = static_cast<int>(std::min<int64_t>(std::max(1, num_threads), num_tasks));
  if (workers == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) body(t, 0);
    return;
  }
  // Threads are started per call: the kernels call this once per tensor with tasks
  // of >= tens of microseconds, so the ~20 us start-up is noise and no global pool
  // state is needed (STYLE habit 5).
  std::atomic<int64_t> next{0};
  std::mutex err_mu;
  int64_t err_task = -1;
  std::exception_ptr err;
  auto run = [&](int worker) {
    for (;;) {
      const int64_t t = next.fetch_add(1, std::memory_order_relaxed);
      if (t >= num_tasks) return;
      try {
        body(t, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (err_task < 0 || t < err_task) {
          err_task = t;
          err = std::current_exception();
        }
        next.store(num_tasks);  // stop handing out work
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(workers - 1));
  for (int w = 1; w < workers; ++w) threads.emplace_back(run, w);
  run(0);
  for (auto& th : threads) th.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace qobs::kernels
