#include "qobs/dtype.h"

#include <algorithm>
#include <array>
#include <string>

#include "core/check.h"
#include "core/text.h"

namespace qobs {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::string_view safetensors;
};

constexpr std::array<DTypeInfo, 11> kInfo{{
    {DType::kF64, "float64", "F64"},
    {DType::kF32, "float32", "F32"},
    {DType::kBF16, "bfloat16", "BF16"},
    {DType::kF16, "float16", "F16"},
    {DType::kF8E4M3, "float8_e4m3fn", "F8_E4M3"},
    {DType::kI8, "int8", "I8"},
    {DType::kI16, "int16", "I16"},
    {DType::kI32, "int32", "I32"},
    {DType::kI64, "int64", "I64"},
    {DType::kU8, "uint8", "U8"},
    {DType::kBool, "bool", "BOOL"},
}};

const DTypeInfo& info(DType dt) { return kInfo[static_cast<std::size_t>(dt)]; }

}  // namespace

std::string_view dtype_name(DType dt) { return info(dt).name; }
std::string_view safetensors_dtype_name(DType dt) { return info(dt).safetensors; }

DType parse_dtype(std::string_view name) {
  std::string s = ascii_lower(name);
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  for (const auto& i : kInfo)
    if (s == i.name) return i.dtype;
  static const std::pair<std::string_view, DType> kAliases[] = {
      {"float", DType::kF32}, {"double", DType::kF64}, {"half", DType::kF16},   {"bf16", DType::kBF16},
      {"fp16", DType::kF16},  {"fp32", DType::kF32},   {"fp8", DType::kF8E4M3}, {"long", DType::kI64},
      {"int", DType::kI32},   {"short", DType::kI16},
  };
  for (const auto& [alias, dt] : kAliases)
    if (s == alias) return dt;
  QOBS_THROW(InvalidArgument, "unknown dtype name '", name, "' (R1.2.2)");
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.safetensors) return i.dtype;
  return std::nullopt;
}

}  // namespace qobs
