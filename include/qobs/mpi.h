// MPI mode (built with -DQOBS_MPI=ON): the Collective of quantize_checkpoint over an MPI
// communicator, and observer statistics reduced across ranks (R6.11). Only this header
// and src/mpi/ see MPI; the plain library is MPI-free.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only
#endif
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "qobs/collective.h"
#include "qobs/observer.h"

namespace qobs::mpi {

/// True when this process was started by an MPI launcher (mpirun / srun set PMIx or
/// OpenMPI variables): only then does the CLI initialise MPI.
bool launched();

/// MPI_Init_thread (funneled: only the calling thread uses MPI) for the lifetime of the
/// object, MPI_Finalize at its end; nothing when MPI is already initialised.
class Session {
 public:
  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  bool owns_ = false;
};

/// A Collective over a duplicate of `comm` whose errors return instead of aborting, so
/// that a rank that cannot reach a peer fails with IoError and cleans up.
///
/// A rank that dies leaves the others blocked in a collective of the shared-memory
/// transport; the launcher then sends them SIGTERM. The CLI's handler only sets the
/// cancel flag, which a blocked rank never reads, so guard_temporary() watches that flag
/// on a thread of its own: it removes the temporary folder at once (under the lock that
/// publish_guarded holds, so never during the rename) and, if the process has not ended
/// its own way two seconds later, sends it SIGTERM again (the CLI's handler ends the
/// process on a second signal).
class MpiCollective : public Collective {
 public:
  explicit MpiCollective(MPI_Comm comm = MPI_COMM_WORLD);
  ~MpiCollective() override;
  MpiCollective(const MpiCollective&) = delete;
  MpiCollective& operator=(const MpiCollective&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  /// This rank's index among the ranks on its host (the shared-memory split of the
  /// communicator, in rank order): what picks its GPU for `--device cuda`.
  int local_rank() const { return local_rank_; }
  std::vector<std::string> allgather(const std::string& bytes) override;
  void post_progress(int64_t modules) override;
  std::vector<std::pair<int, int64_t>> receive_progress(bool wait) override;
  void guard_temporary(const std::filesystem::path& tmp, const std::atomic<bool>* cancel) override;
  void publish_guarded(const std::function<void()>& publish) override;
  MPI_Comm comm() const { return comm_; }

 private:
  void stop_watchdog();
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::filesystem::path tmp_;
  bool stop_ = false;
  std::thread watchdog_;
};

/// Combines every rank's `local` statistics with each statistic's reduce op (R6.11.1)
/// and returns the result on every rank. All ranks' statistics are gathered and combined
/// in rank order by qobs::reduce_statistics, so the result is bit for bit the
/// single-process reduce_statistics of the ranks' statistics in rank order: exact for
/// MIN / MAX and integer SUM in any order, and for the float SUM / AVG because the order
/// is fixed (rank 0, 1, ...), not the transport's. Statistics are small (per-channel or
/// per-group vectors), so gathering them costs little more than an MPI_Allreduce.
Statistics reduce_statistics(const Statistics& local, MPI_Comm comm);

/// Replaces `observer`'s statistics with the reduction over `comm` of every rank's.
void reduce_statistics(Observer& observer, MPI_Comm comm);

}  // namespace qobs::mpi
