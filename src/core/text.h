// ASCII case folding for the names qobs matches case-insensitively (types, strategies,
// dtypes, presets, observer and module names). ASCII only and locale-independent:
// std::tolower would follow the C locale a host program may have changed.
#pragma once

#include <string>
#include <string_view>

namespace qobs {

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

inline std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

}  // namespace qobs
