// The one typing rule of YAML scalars (qobs::yaml_plain_scalar), shared by --config YAML
// documents and --observer-kwarg values: PyYAML's yaml.safe_load, which llm-compressor
// reads recipes with. The expected values are PyYAML's (yaml/resolver.py and
// SafeConstructor), written out by hand; docs/CLI.md "Scalar types" states the rule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "qobs/pipeline.h"
#include "test_util.h"

namespace qobs {
namespace {

FieldValue typed(std::string_view s) { return yaml_plain_scalar(s); }
FieldValue str(const char* s) { return {std::string(s)}; }
FieldValue i64(int64_t v) { return {v}; }
FieldValue dbl(double v) { return {v}; }
FieldValue boolean(bool v) { return {v}; }
FieldValue null() { return {nullptr}; }
FieldValue big(const char* digits) { return {FieldValue::BigInt{digits}}; }

/// Same alternative and same value (JSON text: shortest round-trip for doubles).
::testing::AssertionResult same(const FieldValue& got, const FieldValue& want) {
  if (got.value.index() == want.value.index() && got.dump() == want.dump()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got.dump() << " (alternative " << got.value.index() << "), want "
                                       << want.dump() << " (alternative " << want.value.index() << ")";
}

double as_double(const FieldValue& v) {
  EXPECT_TRUE(std::holds_alternative<double>(v.value)) << v.dump();
  return std::holds_alternative<double>(v.value) ? std::get<double>(v.value) : 0.0;
}

TEST(YamlScalar, Booleans) {
  // YAML 1.1: the six words in three spellings each; other spellings are strings.
  for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
    EXPECT_TRUE(same(typed(t), boolean(true))) << t;
  for (const char* f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
    EXPECT_TRUE(same(typed(f), boolean(false))) << f;
  for (const char* s : {"tRUE", "yEs", "y", "n", "Y", "t", "truee"}) EXPECT_TRUE(same(typed(s), str(s))) << s;
}

TEST(YamlScalar, Nulls) {
  for (const char* n : {"~", "null", "Null", "NULL", ""}) EXPECT_TRUE(same(typed(n), null())) << "'" << n << "'";
  for (const char* s : {"nULL", "none", "None", "nil"}) EXPECT_TRUE(same(typed(s), str(s))) << s;
}

TEST(YamlScalar, Integers) {
  EXPECT_TRUE(same(typed("0"), i64(0)));
  EXPECT_TRUE(same(typed("-0"), i64(0)));
  EXPECT_TRUE(same(typed("42"), i64(42)));
  EXPECT_TRUE(same(typed("+42"), i64(42)));
  EXPECT_TRUE(same(typed("-17"), i64(-17)));
  EXPECT_TRUE(same(typed("1_000"), i64(1000)));
  EXPECT_TRUE(same(typed("0x10"), i64(16)));
  EXPECT_TRUE(same(typed("0xfF"), i64(255)));
  EXPECT_TRUE(same(typed("-0x10"), i64(-16)));
  EXPECT_TRUE(same(typed("0b101"), i64(5)));
  EXPECT_TRUE(same(typed("010"), i64(8)));  // a leading 0 is octal in YAML 1.1
  EXPECT_TRUE(same(typed("0_7"), i64(7)));
  EXPECT_TRUE(same(typed("1:30"), i64(90)));  // base 60
  EXPECT_TRUE(same(typed("-1:0:1"), i64(-3601)));
  EXPECT_TRUE(same(typed("9223372036854775807"), i64(INT64_MAX)));
  EXPECT_TRUE(same(typed("-9223372036854775808"), i64(INT64_MIN)));
  EXPECT_TRUE(same(typed("0x7FFFFFFFFFFFFFFF"), i64(INT64_MAX)));
  // Beyond int64: the digits, which every field then rejects by name and value.
  EXPECT_TRUE(same(typed("9223372036854775808"), big("9223372036854775808")));
  EXPECT_TRUE(same(typed("-9223372036854775809"), big("-9223372036854775809")));
  EXPECT_TRUE(same(typed("0x10000000000000000"), big("18446744073709551616")));
  // Not integers under YAML 1.1: strings.
  for (const char* s : {"0o10", "08", "1e3", "0x", "0b", "1:60", "1_000x", "12abc", "+-1"})
    EXPECT_TRUE(same(typed(s), str(s))) << s;
  testing::expect_error<InvalidArgument>([] { typed("0x_"); }, {"'0x_'", "no digits"});
}

TEST(YamlScalar, Floats) {
  EXPECT_TRUE(same(typed("1.5"), dbl(1.5)));
  EXPECT_TRUE(same(typed("1."), dbl(1.0)));
  EXPECT_TRUE(same(typed(".5"), dbl(0.5)));
  EXPECT_TRUE(same(typed("-2.25"), dbl(-2.25)));
  EXPECT_TRUE(same(typed("+0.3"), dbl(0.3)));
  EXPECT_TRUE(same(typed("1.0e+3"), dbl(1000.0)));
  EXPECT_TRUE(same(typed("2.5E-1"), dbl(0.25)));
  EXPECT_TRUE(same(typed("1_0.2_5"), dbl(10.25)));
  EXPECT_TRUE(same(typed("1:30.5"), dbl(90.5)));  // base 60 with a fraction
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(as_double(typed(".inf")), kInf);
  EXPECT_EQ(as_double(typed("-.Inf")), -kInf);
  EXPECT_EQ(as_double(typed("+.INF")), kInf);
  EXPECT_TRUE(std::isnan(as_double(typed(".NaN"))));
  EXPECT_TRUE(std::isnan(as_double(typed(".nan"))));
  const double neg_zero = as_double(typed("-0.0"));
  EXPECT_TRUE(neg_zero == 0.0 && std::signbit(neg_zero));
  // YAML 1.1 floats need a '.', and an exponent needs its sign: these stay strings.
  for (const char* s : {"1e3", "1.0e3", "1E-3", "inf", "nan", ".nan_", "-.nan", "._5", "1.5.2"})
    EXPECT_TRUE(same(typed(s), str(s))) << s;
}

TEST(YamlScalar, EverythingElseIsAString) {
  // Timestamps (PyYAML: dates) and `=` / `<<` (PyYAML: no constructor, an error) are
  // strings: no field takes a date, and a string fails where the value is used.
  for (const char* s : {"local", "group", "float8_e4m3fn", "2001-12-14", "re:.*mlp.*", "=", "<<", " 1"})
    EXPECT_TRUE(same(typed(s), str(s))) << s;
}

}  // namespace
}  // namespace qobs
