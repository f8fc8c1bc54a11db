// quantize_checkpoint, steps 4-5 (write, publish): the output folder. Everything is
// written into a temporary sibling `.OUT.qobs-tmp-<host>-<pid>` that is renamed into
// place only when complete, so OUT is always either the old complete result or the new
// one. Every file write is checked (IoError naming the file).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "pipeline/plan.h"

namespace qobs::detail {

struct OutputFolder {
  std::filesystem::path out;  ///< absolute, without a trailing '/'; empty for a dry run without one
  std::filesystem::path tmp;  ///< the temporary sibling; empty for a dry run
  std::string host;
};

/// OUT for `options`. Unless a dry run: checks that OUT is neither the input nor holds it
/// nor lies in it, removes what runs of this host killed by SIGKILL left beside it, and
/// refuses an existing OUT without `overwrite`.
OutputFolder prepare_output(const QuantizeOptions& options);

/// Creates the temporary folder with the marker that tells it, once abandoned, from a
/// user's folder.
void create_temporary(const OutputFolder& f);

/// Writes `text` to `p`; IoError naming the file when any part fails.
void write_text(const std::filesystem::path& p, const std::string& text);

/// qobs-report.json and qobs-report.csv in `dir` (created if missing).
void write_reports(const std::filesystem::path& dir, const QuantizeReport& report);

/// model.safetensors.index.json for a sharded checkpoint (R8.8.2).
void write_index(const std::filesystem::path& dir, const Checkpoint& ckpt, const QuantizePlan& plan,
                 uint64_t total_size);

/// config.json: the input's with quantization_config (R8.7).
void write_config(const std::filesystem::path& dir, const Checkpoint& ckpt, const QuantizePlan& plan);

/// Copies every other file of the model folder into `dir` unchanged, except other weight
/// formats (a loader could prefer them over the quantized safetensors).
void copy_other_files(const std::string& model_path, const Checkpoint& ckpt, const std::filesystem::path& dir,
                      const std::function<void()>& check_cancel);

/// Renames the finished temporary folder to OUT, moving an existing OUT aside first.
void publish(const OutputFolder& f);

/// Removes `p` and everything below it, ignoring errors (cleanup on the way out).
void remove_quietly(const std::filesystem::path& p);

/// Rethrows the current exception; an IoError that names a path inside the temporary
/// folder names the final path instead (the user knows only OUT), and the temporary one
/// once, for the record.
[[noreturn]] void rethrow_naming_output(const OutputFolder& f);

}  // namespace qobs::detail
