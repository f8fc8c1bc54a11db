// The MPI side of qobs/mpi.h: every call checks its return code (the communicator's
// errors return) and throws IoError naming the call.
#include "qobs/mpi.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "core/check.h"
#include "qobs/pipeline.h"

namespace qobs::mpi {
namespace fs = std::filesystem;

namespace {

constexpr int kProgressTag = 7301;

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  QOBS_THROW(IoError, call, " failed: ", std::string(text, static_cast<std::size_t>(len)),
             " (another rank ended or cannot be reached)");
}

}  // namespace

bool launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

Session::Session() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  owns_ = true;
}

Session::~Session() {
  if (owns_) MPI_Finalize();
}

MpiCollective::MpiCollective(MPI_Comm comm) {
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  // the ranks that share this host (MPI-3's shared-memory split), in rank order
  MPI_Comm host = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
  const int rc = MPI_Comm_rank(host, &local_rank_);
  MPI_Comm_free(&host);
  check(rc, "MPI_Comm_rank");
}

MpiCollective::~MpiCollective() {
  stop_watchdog();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

std::vector<std::string> MpiCollective::allgather(const std::string& bytes) {
  const auto n = static_cast<std::size_t>(size_);
  std::vector<uint64_t> sizes(n);
  const uint64_t mine = bytes.size();
  check(MPI_Allgather(&mine, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather");
  std::vector<int> counts(n), displs(n);
  uint64_t total = 0;
  for (std::size_t r = 0; r < n; ++r) {
    QOBS_CHECK(total + sizes[r] < (1ull << 31), IoError, "MPI_Allgatherv: the ranks' messages exceed 2 GiB");
    counts[r] = static_cast<int>(sizes[r]);
    displs[r] = static_cast<int>(total);
    total += sizes[r];
  }
  std::string all(total, '\0');
  check(MPI_Allgatherv(bytes.data(), static_cast<int>(mine), MPI_CHAR, all.data(), counts.data(), displs.data(),
                       MPI_CHAR, comm_),
        "MPI_Allgatherv");
  std::vector<std::string> out(n);
  for (std::size_t r = 0; r < n; ++r) out[r] = all.substr(static_cast<std::size_t>(displs[r]), sizes[r]);
  return out;
}

void MpiCollective::post_progress(int64_t modules) {
  // Eight bytes travel eagerly: the send returns without waiting for rank 0 to receive.
  check(MPI_Send(&modules, 1, MPI_INT64_T, 0, kProgressTag, comm_), "MPI_Send");
}

std::vector<std::pair<int, int64_t>> MpiCollective::receive_progress(bool wait) {
  std::vector<std::pair<int, int64_t>> out;
  for (bool block = wait;; block = false) {
    MPI_Status st;
    int ready = 1;
    if (block) check(MPI_Probe(MPI_ANY_SOURCE, kProgressTag, comm_, &st), "MPI_Probe");
    else check(MPI_Iprobe(MPI_ANY_SOURCE, kProgressTag, comm_, &ready, &st), "MPI_Iprobe");
    if (!ready) return out;
    int64_t v = 0;
    check(MPI_Recv(&v, 1, MPI_INT64_T, st.MPI_SOURCE, kProgressTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
    out.emplace_back(st.MPI_SOURCE, v);
  }
}

void MpiCollective::guard_temporary(const fs::path& tmp, const std::atomic<bool>* cancel) {
  stop_watchdog();
  if (tmp.empty() || cancel == nullptr) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    tmp_ = tmp;
    stop_ = false;
  }
  watchdog_ = std::thread([this, cancel] {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_ && !cancel->load()) cv_.wait_for(lk, std::chrono::milliseconds(20));
    if (stop_) return;
    std::error_code ec;
    fs::remove_all(tmp_, ec);  // every rank may: the folder is shared, removal idempotent
    tmp_.clear();
    // The main thread, unless blocked in a collective with a dead peer, stops within
    // this grace period and stops this thread.
    if (cv_.wait_for(lk, std::chrono::seconds(2), [this] { return stop_; })) return;
    ::kill(getpid(), SIGTERM);
  });
}

void MpiCollective::publish_guarded(const std::function<void()>& publish) {
  std::lock_guard<std::mutex> lk(mu_);
  QOBS_CHECK(!tmp_.empty() || !watchdog_.joinable(), Interrupted, "interrupted: the temporary output was removed");
  publish();
}

void MpiCollective::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    tmp_.clear();
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

Statistics reduce_statistics(const Statistics& local, MPI_Comm comm) {
  MpiCollective c(comm);
  const std::vector<uint8_t> mine = local.serialize();
  const std::vector<std::string> all = c.allgather(std::string(mine.begin(), mine.end()));
  std::vector<Statistics> ranks;
  for (const std::string& b : all)
    ranks.push_back(Statistics::deserialize(std::span(reinterpret_cast<const uint8_t*>(b.data()), b.size())));
  return qobs::reduce_statistics(ranks);
}

void reduce_statistics(Observer& observer, MPI_Comm comm) {
  observer.import_statistics(reduce_statistics(observer.export_statistics(), comm));
}

}  // namespace qobs::mpi
