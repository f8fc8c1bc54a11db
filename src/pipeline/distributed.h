// The rank-aware steps of quantize_checkpoint (pipeline.cc), which runs one sequence for
// one process and for several (QuantizeOptions::collective): each step runs on every
// rank, the Collective's rank decides who does which part of it (rank 0 what acts on
// OUT, each rank its share of the jobs), and after each step the ranks agree on errors,
// so that every rank fails with the first rank's error or none does. A single process
// runs the same steps over OneProcess, a Collective of one.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pipeline/plan.h"
#include "pipeline/publish.h"
#include "qobs/collective.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"

namespace qobs::detail {

/// A single process as a Collective: rank 0 of 1. Its allgather hands back its own
/// bytes, and nobody posts progress to it.
class OneProcess final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> allgather(const std::string& bytes) override;
  void post_progress(int64_t) override {}
  std::vector<std::pair<int, int64_t>> receive_progress(bool) override { return {}; }
};

/// The report's fields known after planning (pipeline.cc).
QuantizeReport start_report(const QuantizeOptions& o, const QuantizePlan& plan, const Checkpoint& ckpt,
                            const OutputFolder& folder);

/// Every rank passes the error it caught (null: none); when any rank failed, every rank
/// throws the error of the lowest failing rank, with its exception type (a rank's own
/// error keeps its original object).
void agree_on_errors(Collective& c, std::exception_ptr error);

/// One step: runs `body` on this rank, then `before_agreeing` (work every rank does
/// whether its body failed or not, such as reporting that it finished), then agrees on
/// the errors of `body`. With one process: `body`'s exception, unchanged.
void run_step(Collective& c, const std::function<void()>& body, const std::function<void()>& before_agreeing = {});

/// Rank 0's output folder, on every rank (only rank 0 prepares it: that acts on the
/// file system the ranks share).
void share_output_folder(Collective& c, OutputFolder& folder);

/// On ranks other than 0: checks that the temporary folder rank 0 created is visible
/// (IoError naming both hosts otherwise), then `open_writers()` joins its shard files.
void join_shard_files(const Collective& c, const OutputFolder& folder, const std::function<void()>& open_writers);

/// Marks in `writers` the tensors another rank writes: those of the others' jobs, and
/// on ranks other than 0 the pass-through tensors.
void skip_other_ranks_tensors(const Collective& c, const Checkpoint& ckpt, const QuantizePlan& plan,
                              std::span<const std::size_t> mine,
                              const std::vector<std::unique_ptr<SafetensorsWriter>>& writers);

/// This rank's line of the report's `ranks` before calibration: host, jobs, cost.
RankReport this_rank(const Collective& c, const QuantizePlan& plan, std::span<const std::size_t> mine, bool baseline);

/// Every rank's report lines and RankReport, gathered into `report` on every rank.
void gather_reports(Collective& c, const QuantizePlan& plan, std::span<const std::size_t> mine, const RankReport& me,
                    QuantizeReport& report);

}  // namespace qobs::detail
