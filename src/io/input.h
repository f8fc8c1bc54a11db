// Reading untrusted input files: only regular files are opened (a FIFO would block the
// open forever), and JSON documents (safetensors headers, config.json,
// model.safetensors.index.json) are parsed in one linear pass with a nesting limit.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace qobs::detail {

/// Opens `path` read-only and returns the descriptor, refusing anything but a regular
/// file without blocking (IoError "not a regular file (a FIFO)" and the like).
/// `*size` receives the file size.
int open_regular_file(const std::string& path, uint64_t* size);

/// The whole contents of a regular file (opened as open_regular_file does).
std::string read_regular_file(const std::string& path);

/// Describes a key that repeats inside one object, for the error message. `path` holds
/// the keys leading to that object (empty for the top-level object; an array element
/// adds no key).
using DuplicateKeyMessage = std::function<std::string(const std::vector<std::string>& path, const std::string& key)>;

/// Parses `text` into a DOM. IoError naming `what` when the text is not JSON, when
/// objects and arrays nest deeper than `max_depth` (the top-level container is depth
/// 1), or, when `on_duplicate` is set, when an object repeats a key (the error is
/// `what` + ": " + on_duplicate(path, key)); without it the last value of a repeated
/// key wins, as the JSON library (and Python's json) decides.
/// The depth is checked while parsing, before the deep part is built, so neither the
/// parse nor the destruction of what was built can exhaust the stack.
nlohmann::json parse_json_limited(std::string_view text, const std::string& what, int max_depth,
                                  const DuplicateKeyMessage& on_duplicate = {});

}  // namespace qobs::detail
