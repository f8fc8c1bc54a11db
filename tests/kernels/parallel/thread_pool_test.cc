// The shared thread pool (one thread budget): parallel_for called on a pool thread runs
// on the pool's threads only, nested calls from concurrent pool tasks finish, every
// worker index of a call is used by one thread at a time, and the lowest failing task's
// exception still reaches the caller.
#include "kernels/parallel/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace qobs::kernels {
namespace {

// Runs `tasks` coarse tasks on a pool of `threads`, each calling parallel_for with the
// pool's default thread count; returns once all have finished.
template <typename F>
void run_on_pool(int threads, int tasks, F&& each) {
  std::mutex mu;
  std::condition_variable cv;
  int left = tasks;
  ThreadPool pool(threads);
  for (int i = 0; i < tasks; ++i)
    pool.submit([&, i] {
      each(i);
      std::lock_guard<std::mutex> lk(mu);
      if (--left == 0) cv.notify_all();
    });
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return left == 0; });
}

TEST(ThreadPool, NestedParallelForStaysWithinThePoolsThreads) {
  for (int threads : {1, 2, 3, 5}) {
    std::mutex mu;
    std::set<std::thread::id> seen;
    std::atomic<int> bad_worker{0}, shared_worker{0};
    std::atomic<int64_t> sum{0};
    run_on_pool(threads, 7, [&](int) {
      EXPECT_EQ(resolve_num_threads(0), threads);
      const int outer_workers = resolve_num_threads(0);
      std::vector<std::atomic<int>> busy(static_cast<std::size_t>(outer_workers));
      parallel_for(16, outer_workers, [&](int64_t, int w) {
        if (w < 0 || w >= outer_workers) ++bad_worker;
        if (busy[static_cast<std::size_t>(w)].fetch_add(1) != 0) ++shared_worker;
        parallel_for(50, 0, [&](int64_t t, int) {  // nested: a kernel inside a layer job
          sum += t;
          std::lock_guard<std::mutex> lk(mu);
          seen.insert(std::this_thread::get_id());
        });
        busy[static_cast<std::size_t>(w)].fetch_sub(1);
      });
    });
    EXPECT_EQ(sum.load(), 7 * 16 * (49 * 50 / 2));
    EXPECT_LE(seen.size(), static_cast<std::size_t>(threads)) << threads << " threads";
    EXPECT_EQ(bad_worker.load(), 0);
    EXPECT_EQ(shared_worker.load(), 0);
  }
}

TEST(ThreadPool, RethrowsTheLowestFailingTaskOnThePoolThread) {
  std::vector<std::string> errors(4);
  run_on_pool(3, 4, [&](int i) {
    try {
      parallel_for(100, 0, [](int64_t task, int) {
        if (task == 17 || task == 60) throw std::runtime_error("task " + std::to_string(task));
      });
    } catch (const std::runtime_error& e) {
      errors[static_cast<std::size_t>(i)] = e.what();
    }
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "task 17");
}

TEST(ThreadPool, OutsideAPoolTheThreadCountIsTheRequestedOne) {
  std::mutex mu;
  std::set<std::thread::id> seen;
  std::atomic<int> started{0};
  // Each task waits until three have started, which needs three threads at once.
  parallel_for(3, 3, [&](int64_t, int) {
    ++started;
    while (started.load() < 3) std::this_thread::yield();
    std::lock_guard<std::mutex> lk(mu);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(resolve_num_threads(4), 4);
}

TEST(ThreadPool, OutsideAPoolHelpersAreReusedAndSurviveFork) {
  // Calls outside a pool share parked helper threads: many calls in a row run on a
  // bounded set of threads, not a new one per call. A child process after fork() has
  // none of the parent's threads, so its calls must start their own (a child that
  // waited for the parent's parked helpers would hang: the test would time out).
  std::mutex mu;
  std::set<std::thread::id> seen;
  for (int call = 0; call < 50; ++call)
    parallel_for(4, 2, [&](int64_t, int) {
      std::lock_guard<std::mutex> lk(mu);
      seen.insert(std::this_thread::get_id());
    });
  EXPECT_LE(seen.size(), 3u);  // the caller and its helper (a third only if one was still starting)
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int64_t> sum{0};
    std::atomic<int> started{0};
    parallel_for(2, 2, [&](int64_t t, int) {  // needs two threads at once, as above
      ++started;
      while (started.load() < 2) std::this_thread::yield();
      sum += t + 1;
    });
    _exit(sum.load() == 3 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ThreadPool, RethrowsTheLowestFailingTaskOnTheCaller) {
  for (int threads : {1, 2, 3}) {
    try {
      parallel_for(100, threads, [](int64_t task, int) {
        if (task == 17 || task == 60) throw std::runtime_error("task " + std::to_string(task));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "task 17");
    }
  }
  std::vector<int> hits(1000, 0);
  parallel_for(1000, 3, [&](int64_t t, int) { hits[static_cast<std::size_t>(t)] += 1; });
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_EQ(resolve_num_threads(5), 5);
  EXPECT_GE(resolve_num_threads(0), 1);
}

}  // namespace
}  // namespace qobs::kernels
