// The few collective operations quantize_checkpoint needs to run as one of several
// processes (ranks) that share the work of one conversion. The library stays free of
// MPI: an MPI build implements this interface over a communicator (qobs/mpi.h), and the
// tests implement it over threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace qobs {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Every rank passes its bytes; every rank receives all of them, in rank order. It is
  /// also the barrier of the step it ends. IoError when a peer cannot be reached.
  virtual std::vector<std::string> allgather(const std::string& bytes) = 0;
  /// Progress: a rank other than 0 posts how many modules it finished since its last
  /// post, and -1 once it finished its part, whatever the outcome. Never blocks for long.
  virtual void post_progress(int64_t modules) = 0;
  /// Rank 0: waits (when `wait`) for at least one post, then returns every post received
  /// as (rank, value) pairs.
  virtual std::vector<std::pair<int, int64_t>> receive_progress(bool wait) = 0;
  /// Called on every rank once the temporary folder exists and with an empty path once
  /// it is published or removed. An implementation whose collectives can block forever
  /// on a dead peer removes the folder itself when `cancel` becomes true.
  virtual void guard_temporary(const std::filesystem::path& tmp, const std::atomic<bool>* cancel) {}
  /// Runs `publish` so that it cannot interleave with that removal.
  virtual void publish_guarded(const std::function<void()>& publish) { publish(); }
};

}  // namespace qobs
