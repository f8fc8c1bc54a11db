// The JSON forms of QuantizationArgs and QuantizationScheme, shared by the files that
// read and write them (args_json.cc, scheme.cc, config.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "qobs/args.h"

namespace qobs::detail {

using ojson = nlohmann::ordered_json;

/// A document, or InvalidArgument naming `what` and the parser's message.
ojson parse_json(std::string_view text, const char* what);

/// R1.3.5's field order and spellings.
ojson args_to_ojson(const QuantizationArgs& a);
/// R8.7.5's config.json form (compressed-tensors 0.20's serializer).
ojson args_to_config_ojson(const QuantizationArgs& a);
/// The one parser of R1.2 on a JSON object; validated.
QuantizationArgs args_from_ojson(const ojson& j);

ojson scheme_to_ojson(const QuantizationScheme& s);
/// R8.7.1: the scheme with its args in the config.json form.
ojson scheme_to_config_ojson(const QuantizationScheme& s);
/// R1.4.1's fields; validated.
QuantizationScheme scheme_from_ojson(const ojson& j);

/// A JSON list of strings (targets, ignore lists), or InvalidArgument naming `what` and
/// `rule`.
std::vector<std::string> string_list(const ojson& v, const std::string& what, const char* rule);

}  // namespace qobs::detail
