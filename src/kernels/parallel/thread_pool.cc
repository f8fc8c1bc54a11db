#include "kernels/parallel/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <string>
#include <utility>

#include <pthread.h>

#include "core/check.h"

namespace qobs::kernels {

namespace {
// The pool whose thread this is (null elsewhere): lets parallel_for deep inside the
// kernels find the budget without a thread-count parameter through every layer. Set only
// by a pool's own threads, for their lifetime.
thread_local ThreadPool* tls_pool = nullptr;
}  // namespace

int resolve_num_threads(int requested) {
  if (requested > 0) return requested;
  if (tls_pool) return tls_pool->size();
  if (const char* env = std::getenv("QOBS_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    QOBS_CHECK(end && *end == '\0' && v > 0 && v <= 4096, InvalidArgument, "QOBS_NUM_THREADS='", env,
               "': expected a positive integer");
    return static_cast<int>(v);
  }
  // Asked once: glibc answers by reading /sys on every call (about 5 us), and one
  // observer call resolves its threads several times (2048 tiny activation batches per
  // Linear add up).
  static const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return hardware;
}

// The state of one parallel_for call, shared by the threads that run its tasks.
struct detail::ParallelBatch {
  ParallelBatch(const std::function<void(int64_t, int)>& b, int64_t n, int w) : body(&b), num_tasks(n), workers(w) {}

  const std::function<void(int64_t, int)>* body;
  int64_t num_tasks;
  int workers;                       // worker indices [0, workers); the caller is 0
  std::atomic<int64_t> next{0};      // the next task to hand out
  int joined = 1;                    // worker indices handed out (pool mutex)
  int helping = 0;                   // helpers still inside (pool mutex)
  std::atomic<int> helpers_left{0};  // helpers not yet done (HelperSet)
  std::mutex err_mu;
  int64_t err_task = -1;
  std::exception_ptr err;

  void run(int worker) {
    for (;;) {
      const int64_t t = next.fetch_add(1, std::memory_order_relaxed);
      if (t >= num_tasks) return;
      try {
        (*body)(t, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (err_task < 0 || t < err_task) {
          err_task = t;
          err = std::current_exception();
        }
        next.store(num_tasks);  // stop handing out work
      }
    }
  }
};

namespace {

// Helpers for parallel_for calls made outside a ThreadPool (a kernel called from Python
// or from a test). Starting and joining a thread costs 150-200 us on the 2-core VMs this
// runs on, and one observer call makes several parallel_for calls (min-max, statistics
// checks, qparams): per call that was more than the work of an NVFP4 weight's qparams.
// The set hands each call exactly num_threads - 1 helpers at once, starting threads only
// when fewer are parked, so a call keeps the concurrency it asked for even when other
// threads call parallel_for at the same time (tests rely on it). Parked threads hold no
// work and no data; the set is never destroyed (threads parked at exit simply end with
// the process), and a child process after fork() starts a fresh one, since the parent's
// threads do not exist there.
class HelperSet {
 public:
  static HelperSet& instance() {
    static const bool registered = [] {
      pthread_atfork(nullptr, nullptr, [] { current_.store(nullptr, std::memory_order_relaxed); });
      return true;
    }();
    (void)registered;
    HelperSet* h = current_.load(std::memory_order_acquire);
    if (h) return *h;
    std::lock_guard<std::mutex> lk(create_mu_);
    h = current_.load(std::memory_order_relaxed);
    if (!h) {
      h = new HelperSet;  // intentionally never deleted (see above)
      current_.store(h, std::memory_order_release);
    }
    return *h;
  }

  // Runs b with its worker indices 1..workers-1 on helpers and 0 on the caller.
  void run(detail::ParallelBatch& b) {
    const int helpers = b.workers - 1;
    b.helpers_left.store(helpers, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (int w = 1; w <= helpers; ++w) slots_.push_back({&b, w});
      queued_.store(static_cast<int>(slots_.size()), std::memory_order_release);
      // Every queued slot has a thread of its own: parked, or starting now.
      for (int deficit = static_cast<int>(slots_.size()) - parked_ - starting_; deficit > 0; --deficit) {
        ++starting_;
        std::thread([this] { park(); }).detach();
      }
    }
    cv_.notify_all();
    b.run(0);
    // The helpers' last tasks end about when the caller's do: a short spin avoids a
    // sleep and a wake-up, each tens of microseconds on a busy VM.
    if (!spin_until([&] { return b.helpers_left.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lk(mu_);
      done_cv_.wait(lk, [&] { return b.helpers_left.load(std::memory_order_acquire) == 0; });
    }
  }

 private:
  struct Slot {
    detail::ParallelBatch* batch;
    int worker;
  };

  // Polls `ready` for up to kSpin; true once it holds.
  template <typename Ready>
  static bool spin_until(Ready ready) {
    constexpr auto kSpin = std::chrono::microseconds(50);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
      if (ready()) return true;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::yield();
    }
  }

  void park() {
    std::unique_lock<std::mutex> lk(mu_);
    --starting_;
    for (;;) {
      ++parked_;
      if (slots_.empty()) {
        // An observer call makes several parallel_for calls in a row: stay awake briefly
        // for the next one instead of sleeping until it wakes this thread.
        lk.unlock();
        spin_until([&] { return queued_.load(std::memory_order_acquire) > 0; });
        lk.lock();
        cv_.wait(lk, [&] { return !slots_.empty(); });
      }
      --parked_;
      const Slot s = slots_.front();
      slots_.pop_front();
      queued_.store(static_cast<int>(slots_.size()), std::memory_order_release);
      lk.unlock();
      s.batch->run(s.worker);
      if (s.batch->helpers_left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // the caller may be asleep: notify under the mutex so the wake-up is not lost
        lk.lock();
        done_cv_.notify_all();
      } else {
        lk.lock();
      }
    }
  }

  static inline std::atomic<HelperSet*> current_{nullptr};
  static inline std::mutex create_mu_;
  std::mutex mu_;
  std::condition_variable cv_;       // a slot is queued
  std::condition_variable done_cv_;  // a helper left a batch
  std::deque<Slot> slots_;
  std::atomic<int> queued_{0};  // slots_.size(), for the spinning threads
  int parked_ = 0;              // threads waiting for a slot
  int starting_ = 0;            // threads started that have not yet parked
};

}  // namespace

void parallel_for(int64_t num_tasks, int num_threads, const std::function<void(int64_t, int)>& body) {
  if (num_tasks <= 0) return;
  const int workers = static_cast<int>(std::min<int64_t>(std::max(1, num_threads), num_tasks));
  if (workers == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) body(t, 0);
    return;
  }
  detail::ParallelBatch b(body, num_tasks, workers);
  if (tls_pool) tls_pool->run_batch(b);
  else HelperSet::instance().run(b);
  if (b.err) std::rethrow_exception(b.err);
}

ThreadPool::ThreadPool(int num_threads) : size_(num_threads) {
  QOBS_CHECK(num_threads >= 1, InvalidArgument, "thread pool size must be at least 1, got ", num_threads);
  threads_.reserve(static_cast<std::size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& th : threads_) th.join();
}

void ThreadPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

// The caller (a pool thread) runs tasks as worker 0 while idle pool threads join with the
// next free worker index. Nothing here waits for a thread that is not already running
// one of this batch's tasks, so nesting cannot deadlock: an owner whose helpers are all
// busy elsewhere simply runs every task itself.
void ThreadPool::run_batch(Batch& b) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    batches_.push_back(&b);
  }
  for (int w = 1; w < b.workers; ++w) work_cv_.notify_one();
  b.run(0);
  std::unique_lock<std::mutex> lk(mu_);
  // No task is left to hand out: close the batch, then wait for the helpers' last tasks
  // (b lives on this stack).
  if (const auto it = std::find(batches_.begin(), batches_.end(), &b); it != batches_.end()) batches_.erase(it);
  idle_cv_.wait(lk, [&] { return b.helping == 0; });
}

// Helping running batches comes first: it finishes the layers already in memory (the
// writer waits for the oldest) before another one is started.
void ThreadPool::work() {
  tls_pool = this;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || !batches_.empty() || !queue_.empty(); });
    if (!batches_.empty()) {
      Batch* b = batches_.front();
      const int worker = b->joined++;
      ++b->helping;
      if (b->joined == b->workers) batches_.pop_front();  // every worker index is taken
      lk.unlock();
      b->run(worker);
      lk.lock();
      if (--b->helping == 0) idle_cv_.notify_all();
      continue;
    }
    if (!queue_.empty()) {
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lk.unlock();
      task();
      lk.lock();
      continue;
    }
    return;  // stop_ and nothing left
  }
}

}  // namespace qobs::kernels
