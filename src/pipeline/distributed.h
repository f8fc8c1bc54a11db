// quantize_checkpoint as one of several processes (QuantizeOptions::collective): the same
// steps as pipeline.cc, with the jobs split over the ranks and an agreement on errors
// after each step, so that every rank fails with the first rank's error or none does.
#pragma once

#include <exception>

#include "pipeline/plan.h"
#include "pipeline/publish.h"
#include "qobs/collective.h"
#include "qobs/pipeline.h"

namespace qobs::detail {

/// The report's fields known after planning (pipeline.cc).
QuantizeReport start_report(const QuantizeOptions& o, const QuantizePlan& plan, const Checkpoint& ckpt,
                            const OutputFolder& folder);

/// Every rank passes the error it caught (null: none); when any rank failed, every rank
/// throws the error of the lowest failing rank, with its exception type.
void agree_on_errors(Collective& c, std::exception_ptr error);

/// quantize_checkpoint with `o.collective` set and `o.threads` resolved.
QuantizeReport quantize_distributed(const QuantizeOptions& o, const ProgressCallback& progress);

}  // namespace qobs::detail
