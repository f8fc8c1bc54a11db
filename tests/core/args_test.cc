// RULES §1 QuantizationArgs, schemes, presets and configs, and R8.1.2 format inference.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qobs/args.h"
#include "qobs/error.h"
#include "test_util.h"

namespace qobs {
namespace {

using testing::expect_error;

QuantizationArgs int_args(int bits = 8) {
  QuantizationArgs a;
  a.num_bits = bits;
  return a;
}

// ---- R1.1 enumerations ------------------------------------------------------------------

TEST(Args, R1_1_1_TypeParsingIsCaseInsensitive) {
  EXPECT_EQ(parse_quant_type("INT"), QuantType::kInt);
  EXPECT_EQ(parse_quant_type("Float"), QuantType::kFloat);
  EXPECT_THROW(parse_quant_type("fp"), InvalidArgument);
  EXPECT_THROW(parse_quant_type(""), InvalidArgument);
  EXPECT_EQ(to_string(QuantType::kFloat), "float");
}

TEST(Args, R1_1_2_StrategyParsing) {
  const std::pair<const char*, Strategy> all[] = {
      {"TENSOR", Strategy::kTensor},      {"Channel", Strategy::kChannel}, {"group", Strategy::kGroup},
      {"BLOCK", Strategy::kBlock},        {"token", Strategy::kToken},     {"Tensor_Group", Strategy::kTensorGroup},
      {"attn_head", Strategy::kAttnHead},
  };
  for (const auto& [s, v] : all) {
    EXPECT_EQ(parse_strategy(s), v) << s;
    EXPECT_EQ(parse_strategy(to_string(v)), v);
  }
  EXPECT_THROW(parse_strategy("row"), InvalidArgument);
}

TEST(Args, R1_1_3_DynamicParsing) {
  EXPECT_EQ(parse_dynamic("LOCAL"), Dynamic::kLocal);
  EXPECT_EQ(parse_dynamic("local"), Dynamic::kLocal);
  EXPECT_THROW(parse_dynamic("global"), InvalidArgument);
  // JSON: booleans kept, a string must be "local".
  EXPECT_EQ(QuantizationArgs::from_json(R"({"dynamic": true, "strategy": "token"})").dynamic, Dynamic::kTrue);
  EXPECT_EQ(
      QuantizationArgs::from_json(R"({"dynamic": "Local", "strategy": "tensor_group", "group_size": 16})").dynamic,
      Dynamic::kLocal);
  EXPECT_THROW(QuantizationArgs::from_json(R"({"dynamic": "yes", "strategy": "token"})"), InvalidArgument);
}

TEST(Args, R1_1_4_ActorderAliases) {
  EXPECT_EQ(parse_actorder("GROUP"), ActOrder::kGroup);
  EXPECT_EQ(parse_actorder("weight"), ActOrder::kWeight);
  EXPECT_EQ(parse_actorder("Dynamic"), ActOrder::kDynamic);
  EXPECT_EQ(parse_actorder("static"), ActOrder::kStatic);
  EXPECT_THROW(parse_actorder("random"), InvalidArgument);
  EXPECT_TRUE(actorder_equivalent(ActOrder::kDynamic, ActOrder::kGroup));
  EXPECT_TRUE(actorder_equivalent(ActOrder::kStatic, ActOrder::kWeight));
  EXPECT_FALSE(actorder_equivalent(ActOrder::kGroup, ActOrder::kWeight));
  EXPECT_FALSE(actorder_equivalent(ActOrder::kNone, ActOrder::kGroup));
  EXPECT_EQ(actorder_canonical(ActOrder::kDynamic), ActOrder::kGroup);
  EXPECT_EQ(actorder_canonical(ActOrder::kStatic), ActOrder::kWeight);
  // true -> group, false -> null in JSON; the spelling is preserved in serialization.
  const auto a = QuantizationArgs::from_json(R"({"group_size": 128, "actorder": true})");
  EXPECT_EQ(actorder_canonical(a.actorder), ActOrder::kGroup);
  EXPECT_EQ(QuantizationArgs::from_json(R"({"actorder": false})").actorder, ActOrder::kNone);
  const auto d = QuantizationArgs::from_json(R"({"group_size": 128, "actorder": "dynamic"})");
  EXPECT_EQ(nlohmann::json::parse(d.to_json())["actorder"], "dynamic");
  QuantizationArgs g = d;
  g.actorder = ActOrder::kGroup;
  EXPECT_EQ(d, g) << "alias-aware equality";
}

// ---- R1.2 fields --------------------------------------------------------------------------

TEST(Args, R1_2_1_UnknownFieldsRejected) {
  expect_error<InvalidArgument>([] { QuantizationArgs::from_json(R"({"num_bits": 8, "bits": 4})"); }, {"bits"});
  EXPECT_THROW(QuantizationScheme::from_json(R"({"targets": ["Linear"], "wieghts": null})"), InvalidArgument);
}

TEST(Args, R1_2_2_GroupSizeCheck) {
  QuantizationArgs a;
  a.group_size = -2;
  EXPECT_THROW(a.validated(), InvalidArgument);
  a.group_size = -1;
  EXPECT_EQ(a.validated().get_strategy(), Strategy::kChannel);
  EXPECT_THROW(QuantizationArgs::from_json(R"({"group_size": -5})"), InvalidArgument);
}

TEST(Args, R1_2_2_BlockStructureParsing) {
  EXPECT_EQ(parse_block_structure("128x64"), (std::array<int64_t, 2>{128, 64}));
  for (const char* bad : {"2x4x8", "0x4", "4x-1"}) {
    SCOPED_TRACE(bad);
    expect_error<InvalidArgument>([&] { parse_block_structure(bad); }, {"positive"});
  }
  EXPECT_THROW(parse_block_structure("axb"), InvalidArgument);
  EXPECT_THROW(parse_block_structure("128"), InvalidArgument);
  const auto a = QuantizationArgs::from_json(R"({"strategy": "block", "block_structure": "2x4"})");
  EXPECT_EQ(a.block_structure, (std::array<int64_t, 2>{2, 4}));
  const auto b = QuantizationArgs::from_json(R"({"strategy": "block", "block_structure": [3, 5]})");
  EXPECT_EQ(b.block_structure, (std::array<int64_t, 2>{3, 5}));
  expect_error<InvalidArgument>(
      [] { QuantizationArgs::from_json(R"({"strategy": "block", "block_structure": [0, 4]})"); }, {"positive"});
  EXPECT_THROW(QuantizationArgs::from_json(R"({"strategy": "block", "block_structure": [1, 2, 3]})"), InvalidArgument);
  EXPECT_THROW(QuantizationArgs::from_json(R"({"strategy": "block", "block_structure": [1.5, 2]})"), InvalidArgument);
  EXPECT_THROW(QuantizationArgs::from_json(R"({"strategy": "block", "block_structure": 4})"), InvalidArgument);
  QuantizationArgs c;
  c.strategy = Strategy::kBlock;
  c.block_structure = std::array<int64_t, 2>{4, -1};
  expect_error<InvalidArgument>([&] { c.validated(); }, {"positive"});
}

// One parser (R1.2): a bad value gives the same message whether it arrives as JSON or as
// fields (the Python binding's keywords). Each row: the JSON document, the same values as
// fields, and a substring the message must contain.
using FV = FieldValue;
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return std::string("InvalidArgument: ") + e.what();
  } catch (const NotImplementedError& e) {
    return std::string("NotImplementedError: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "(no exception)";
}

TEST(Args, R1_2_SameMessageFromJsonAndFields) {
  const auto big = [](const char* d) { return FV{FV::BigInt{d}}; };
  const auto list = [](std::initializer_list<FV> l) { return FV{FV::List(l)}; };
  struct Case {
    const char* json;
    FV::Map fields;
    const char* needle;
  };
  const Case cases[] = {
      {R"({"num_bits": "8"})",
       {{"num_bits", {std::string("8")}}},
       "QuantizationArgs.num_bits: expected an integer, got \"8\""},
      {R"({"num_bits": 4.5})", {{"num_bits", {4.5}}}, "expected an integer, got 4.5"},
      {R"({"num_bits": true})", {{"num_bits", {true}}}, "expected an integer, got true"},
      {R"({"num_bits": 1099511627776})",
       {{"num_bits", {int64_t{1} << 40}}},
       "num_bits 1099511627776 is out of the int32 range"},
      {R"({"num_bits": 9223372036854775808})",
       {{"num_bits", big("9223372036854775808")}},
       "num_bits 9223372036854775808 is out of the int64 range"},
      {R"({"num_bits": 5, "type": "float"})", {{"num_bits", {int64_t{5}}}, {"type", {std::string("float")}}}, "R1.3.2"},
      {R"({"type": "bfloat"})", {{"type", {std::string("bfloat")}}}, "type: 'bfloat' is not one of int, float"},
      {R"({"type": 1})", {{"type", {int64_t{1}}}}, "QuantizationArgs.type: expected a string, got 1"},
      {R"({"symmetric": 1})", {{"symmetric", {int64_t{1}}}}, "expected a boolean, got 1"},
      {R"({"group_size": "128"})", {{"group_size", {std::string("128")}}}, "expected an integer or null"},
      {R"({"group_size": -2})", {{"group_size", {int64_t{-2}}}}, "group_size -2 is invalid"},
      {R"({"strategy": "group", "group_size": 9223372036854775808})",
       {{"strategy", {std::string("group")}}, {"group_size", big("9223372036854775808")}},
       "group_size 9223372036854775808 is out of the int64 range"},
      {R"({"strategy": "rows"})", {{"strategy", {std::string("rows")}}}, "strategy: 'rows' is not one of"},
      {R"({"strategy": "group"})", {{"strategy", {std::string("group")}}}, "R1.3.1-3"},
      {R"({"strategy": "block", "block_structure": [2, 4, 8]})",
       {{"strategy", {std::string("block")}}, {"block_structure", list({{int64_t{2}}, {int64_t{4}}, {int64_t{8}}})}},
       "expected two positive integers, got [2,4,8]"},
      {R"({"strategy": "block", "block_structure": [4, -1]})",
       {{"strategy", {std::string("block")}}, {"block_structure", list({{int64_t{4}}, {int64_t{-1}}})}},
       "block_structure [4,-1] must be two positive integers"},
      {R"({"strategy": "block", "block_structure": [9223372036854775808, 1]})",
       {{"strategy", {std::string("block")}}, {"block_structure", list({big("9223372036854775808"), {int64_t{1}}})}},
       "block_structure element 9223372036854775808 is out of the int64 range"},
      {R"({"strategy": "block", "block_structure": "0x4"})",
       {{"strategy", {std::string("block")}}, {"block_structure", {std::string("0x4")}}},
       "positive"},
      {R"({"dynamic": "true"})",
       {{"dynamic", {std::string("true")}}},
       "dynamic: string value 'true' must be \"local\""},
      {R"({"dynamic": 1})", {{"dynamic", {int64_t{1}}}}, "expected a boolean or \"local\", got 1"},
      {R"({"actorder": "rows"})", {{"actorder", {std::string("rows")}}}, "actorder: 'rows' is not one of"},
      {R"({"actorder": 2})", {{"actorder", {int64_t{2}}}}, "expected a string, boolean or null, got 2"},
      {R"({"scale_dtype": "float7"})", {{"scale_dtype", {std::string("float7")}}}, "float7"},
      {R"({"zp_dtype": 8})", {{"zp_dtype", {int64_t{8}}}}, "expected a dtype name or null, got 8"},
      {R"({"observer": ["mse"]})",
       {{"observer", list({{std::string("mse")}})}},
       "expected a string or null, got [\"mse\"]"},
      {R"({"observer_kwargs": [1]})", {{"observer_kwargs", list({{int64_t{1}}})}}, "observer_kwargs must be an object"},
      {R"({"observer_kwargs": {"bad": [1, 2]}})",
       {{"observer_kwargs", {FV::Map{{"bad", list({{int64_t{1}}, {int64_t{2}}})}}}}},
       "observer_kwargs['bad']: unsupported value [1,2]"},
      {R"({"num_bits": 8, "bits": 4})", {{"num_bits", {int64_t{8}}}, {"bits", {int64_t{4}}}}, "unknown field 'bits'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    const std::string from_json = message_of([&] { QuantizationArgs::from_json(c.json); });
    const std::string from_fields = message_of([&] { QuantizationArgs::from_fields(c.fields); });
    EXPECT_NE(from_json.find(c.needle), std::string::npos) << from_json;
    EXPECT_EQ(from_json, from_fields);
  }
  // A value with no JSON form (a Python object) is named by its type.
  expect_error<InvalidArgument>(
      [] {
        QuantizationArgs::from_fields({{"num_bits", {FV::Foreign{"set"}}}});
      },
      {"QuantizationArgs.num_bits: expected an integer, got <set>"});
}

TEST(Args, R1_2_FieldsGiveTheSameArgsAsJson) {
  const FV::Map fields{{"num_bits", {int64_t{4}}},
                       {"type", {std::string("float")}},
                       {"strategy", {std::string("tensor_group")}},
                       {"group_size", {int64_t{16}}},
                       {"dynamic", {std::string("LOCAL")}},
                       {"scale_dtype", {std::string("torch.float8_e4m3fn")}},
                       {"observer_kwargs", {FV::Map{{"maxshrink", {0.25}}, {"patience", {int64_t{3}}}}}}};
  const auto j = QuantizationArgs::from_json(
      R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "LOCAL",
          "scale_dtype": "torch.float8_e4m3fn", "observer_kwargs": {"maxshrink": 0.25, "patience": 3}})");
  EXPECT_EQ(QuantizationArgs::from_fields(fields), j);
  EXPECT_EQ(j.observer_kwargs.at("patience"), KwargValue(int64_t{3}));
  EXPECT_EQ(QuantizationArgs::from_fields({}), QuantizationArgs{}.validated());
}

TEST(Args, R1_2_2_DtypeFields) {
  const auto a = QuantizationArgs::from_json(R"({"scale_dtype": "torch.float8_e4m3fn", "zp_dtype": "uint8"})");
  EXPECT_EQ(a.scale_dtype, DType::kF8E4M3);
  EXPECT_EQ(a.zp_dtype, DType::kU8);
  EXPECT_EQ(QuantizationArgs::from_json(R"({"scale_dtype": "torch.uint8"})").scale_dtype, DType::kU8);
  EXPECT_THROW(QuantizationArgs::from_json(R"({"scale_dtype": "torch.float7"})"), InvalidArgument);
}

TEST(Args, R1_2_Defaults) {
  const QuantizationArgs a = QuantizationArgs{}.validated();
  EXPECT_EQ(a.num_bits, 8);
  EXPECT_EQ(a.type, QuantType::kInt);
  EXPECT_TRUE(a.symmetric);
  EXPECT_FALSE(a.group_size.has_value());
  EXPECT_EQ(a.get_strategy(), Strategy::kTensor);
  EXPECT_EQ(a.dynamic, Dynamic::kFalse);
  EXPECT_EQ(a.actorder, ActOrder::kNone);
  EXPECT_FALSE(a.scale_dtype.has_value());
  EXPECT_EQ(a.zp_dtype, DType::kI8);
  EXPECT_EQ(a.observer, "memoryless_minmax");
  EXPECT_TRUE(a.observer_kwargs.empty());
  EXPECT_THROW(QuantizationArgs{}.get_strategy(), PreconditionError);
}

// ---- R1.3.1 validation order -----------------------------------------------------------

TEST(Args, R1_3_1_Step1StrategyInference) {
  QuantizationArgs a;
  EXPECT_EQ(a.validated().get_strategy(), Strategy::kTensor);
  a.group_size = 64;
  EXPECT_EQ(a.validated().get_strategy(), Strategy::kGroup);
  a.group_size = -1;
  EXPECT_EQ(a.validated().get_strategy(), Strategy::kChannel);
  a.group_size = 0;
  expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-1"});
}

TEST(Args, R1_3_1_Step2StaticTokenRejected) {
  QuantizationArgs a;
  a.strategy = Strategy::kToken;
  expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-2"});
  // Step 2 precedes step 4 (group_size with a non-group strategy).
  a.group_size = 128;
  expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-2"});
  a.group_size.reset();
  a.dynamic = Dynamic::kTrue;
  EXPECT_EQ(a.validated().get_strategy(), Strategy::kToken);
}

TEST(Args, R1_3_1_Step3GroupNeedsPositiveGroupSize) {
  for (Strategy s : {Strategy::kGroup, Strategy::kTensorGroup}) {
    QuantizationArgs a;
    a.strategy = s;
    expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-3"});
    a.group_size = 0;
    expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-3"});
    a.group_size = -1;
    expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-3"});
    // Step 3 precedes step 5 (block_structure with a non-block strategy).
    a.block_structure = std::array<int64_t, 2>{2, 2};
    expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-3"});
  }
}

TEST(Args, R1_3_1_Step4GroupSizeOnlyForGroups) {
  for (Strategy s : {Strategy::kTensor, Strategy::kChannel, Strategy::kBlock}) {
    QuantizationArgs a;
    a.strategy = s;
    a.group_size = 128;
    if (s == Strategy::kBlock) a.block_structure = std::array<int64_t, 2>{2, 2};
    expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-4"});
  }
  // Step 4 precedes step 5.
  QuantizationArgs a;
  a.strategy = Strategy::kChannel;
  a.group_size = 128;
  a.block_structure = std::array<int64_t, 2>{2, 2};
  expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-4"});
  // R1.3.3: group_size 0 with an explicit non-group strategy is accepted.
  a.block_structure.reset();
  a.group_size = 0;
  EXPECT_NO_THROW(a.validated());
}

TEST(Args, R1_3_1_Step5BlockStructure) {
  QuantizationArgs a;
  a.strategy = Strategy::kBlock;
  expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-5"});
  QuantizationArgs b;
  b.strategy = Strategy::kTensor;
  b.block_structure = std::array<int64_t, 2>{128, 128};
  expect_error<InvalidArgument>([&] { b.validated(); }, {"R1.3.1-5"});
  // Step 5 precedes step 6.
  b.actorder = ActOrder::kGroup;
  expect_error<InvalidArgument>([&] { b.validated(); }, {"R1.3.1-5"});
}

TEST(Args, R1_3_1_Step6ActorderGroupNeedsGroupStrategy) {
  QuantizationArgs a;
  a.strategy = Strategy::kChannel;
  a.actorder = ActOrder::kDynamic;
  expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-6"});
  // Step 6 precedes step 7 (channel is also illegal for dynamic).
  a.dynamic = Dynamic::kTrue;
  expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-6"});
  // actorder weight is legal with any strategy.
  QuantizationArgs w;
  w.strategy = Strategy::kChannel;
  w.actorder = ActOrder::kWeight;
  EXPECT_NO_THROW(w.validated());
  QuantizationArgs g;
  g.group_size = 128;
  g.actorder = ActOrder::kGroup;
  EXPECT_NO_THROW(g.validated());
}

TEST(Args, R1_3_1_Step7DynamicStrategies) {
  for (Strategy s : {Strategy::kChannel, Strategy::kAttnHead}) {
    QuantizationArgs a;
    a.strategy = s;
    a.dynamic = Dynamic::kTrue;
    expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.3.1-7"});
  }
  QuantizationArgs b;
  b.strategy = Strategy::kBlock;
  b.block_structure = std::array<int64_t, 2>{2, 2};
  b.dynamic = Dynamic::kTrue;
  expect_error<InvalidArgument>([&] { b.validated(); }, {"R1.3.1-7"});
  for (Strategy s : {Strategy::kTensor, Strategy::kToken}) {
    QuantizationArgs l;
    l.strategy = s;
    l.dynamic = Dynamic::kLocal;
    expect_error<InvalidArgument>([&] { l.validated(); }, {"R1.3.1-7"});
  }
  QuantizationArgs g;
  g.group_size = 16;
  g.dynamic = Dynamic::kLocal;
  expect_error<InvalidArgument>([&] { g.validated(); }, {"R1.3.1-7"});
}

TEST(Args, R1_3_1_Step7And8ObserverDefaults) {
  QuantizationArgs a;
  a.strategy = Strategy::kToken;
  a.dynamic = Dynamic::kTrue;
  a.observer = "minmax";
  EXPECT_FALSE(a.validated().observer.has_value()) << "dynamic true drops the observer";
  a.observer = "memoryless";
  EXPECT_FALSE(a.validated().observer.has_value());
  QuantizationArgs l;
  l.strategy = Strategy::kTensorGroup;
  l.group_size = 16;
  l.dynamic = Dynamic::kLocal;
  EXPECT_EQ(l.validated().observer, "minmax");
  l.observer = "static_minmax";
  EXPECT_EQ(l.validated().observer, "static_minmax");
  QuantizationArgs s;
  EXPECT_EQ(s.validated().observer, "memoryless_minmax");
  s.observer = "mse";
  EXPECT_EQ(s.validated().observer, "mse");
  s.observer = "no_such_observer";  // R1.3.3: existence is not checked here
  EXPECT_EQ(s.validated().observer, "no_such_observer");
}

TEST(Args, R1_3_1_Step9ZpDtypeInference) {
  auto zp = [](int bits, QuantType t) {
    QuantizationArgs a;
    a.num_bits = bits;
    a.type = t;
    return a.validated().zp_dtype;
  };
  EXPECT_EQ(zp(4, QuantType::kFloat), DType::kF8E4M3);
  EXPECT_EQ(zp(6, QuantType::kFloat), DType::kF8E4M3);  // compressed-tensors 0.20 (0.19 raised)
  EXPECT_EQ(zp(8, QuantType::kFloat), DType::kF8E4M3);
  EXPECT_EQ(zp(4, QuantType::kInt), DType::kI8);
  EXPECT_EQ(zp(8, QuantType::kInt), DType::kI8);
  EXPECT_EQ(zp(9, QuantType::kInt), DType::kI16);
  EXPECT_EQ(zp(16, QuantType::kInt), DType::kI16);
  EXPECT_EQ(zp(17, QuantType::kInt), DType::kI32);
  // float widths other than 4, 6 and 8 have no storage dtype to infer
  QuantizationArgs f5;
  f5.num_bits = 5;
  f5.type = QuantType::kFloat;
  EXPECT_THROW(f5.validated(), NotImplementedError);
  f5.zp_dtype = DType::kF8E4M3;
  EXPECT_NO_THROW(f5.validated());
  QuantizationArgs keep;
  keep.zp_dtype = DType::kI32;
  EXPECT_EQ(keep.validated().zp_dtype, DType::kI32);
}

TEST(Args, R1_3_1_FieldChecksRunBeforeInference) {
  // R1.2.2 (group_size < -1) fails before R1.3.1-2 (static token).
  QuantizationArgs a;
  a.strategy = Strategy::kToken;
  a.group_size = -2;
  expect_error<InvalidArgument>([&] { a.validated(); }, {"R1.2.2"});
}

TEST(Args, R1_3_1_ValidatedIsIdempotent) {
  QuantizationArgs a;
  a.group_size = 32;
  a.symmetric = false;
  const auto v = a.validated();
  EXPECT_EQ(v.validated(), v);
}

TEST(Args, R1_3_2_PytorchDtype) {
  QuantizationArgs f8;
  f8.type = QuantType::kFloat;
  EXPECT_EQ(f8.pytorch_dtype(), DType::kF8E4M3);
  f8.num_bits = 4;
  EXPECT_THROW(f8.pytorch_dtype(), NotImplementedError);
  EXPECT_EQ(int_args(2).pytorch_dtype(), DType::kI8);
  EXPECT_EQ(int_args(8).pytorch_dtype(), DType::kI8);
  EXPECT_EQ(int_args(12).pytorch_dtype(), DType::kI16);
  EXPECT_EQ(int_args(32).pytorch_dtype(), DType::kI32);
}

TEST(Args, R1_3_3_AcceptedSilently) {
  QuantizationArgs fp4;
  fp4.num_bits = 4;
  fp4.type = QuantType::kFloat;
  fp4.symmetric = false;  // asymmetric FP4 fails only later (R4.1)
  EXPECT_NO_THROW(fp4.validated());
  QuantizationArgs mx;
  mx.num_bits = 4;
  mx.type = QuantType::kFloat;
  mx.group_size = 32;
  mx.scale_dtype = DType::kU8;
  mx.symmetric = false;
  EXPECT_NO_THROW(mx.validated());
  QuantizationArgs odd;
  odd.scale_dtype = DType::kI64;
  EXPECT_NO_THROW(odd.validated());
}

// ---- R1.3.5 serialization ---------------------------------------------------------------

TEST(Args, R1_3_5_JsonKeyOrder) {
  const std::vector<std::string> expected{"num_bits",        "type",           "symmetric", "group_size",  "strategy",
                                          "block_structure", "dynamic",        "actorder",  "scale_dtype", "zp_dtype",
                                          "observer",        "observer_kwargs"};
  QuantizationArgs a;
  a.group_size = 128;
  a.observer_kwargs["maxshrink"] = 0.5;
  const auto j = nlohmann::ordered_json::parse(a.validated().to_json());
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, expected);
  const auto k = nlohmann::ordered_json::parse(a.validated().to_json(2));
  std::vector<std::string> keys2;
  for (auto it = k.begin(); it != k.end(); ++it) keys2.push_back(it.key());
  EXPECT_EQ(keys2, expected);
}

TEST(Args, R1_3_5_JsonValues) {
  const auto nv = preset_scheme("NVFP4");
  const auto w = nlohmann::json::parse(nv.weights->to_json());
  // R8.7.4 example.
  EXPECT_EQ(w, nlohmann::json::parse(R"({"actorder": null, "block_structure": null, "dynamic": false,
    "group_size": 16, "num_bits": 4, "observer": "memoryless_minmax", "observer_kwargs": {},
    "scale_dtype": "torch.float8_e4m3fn", "strategy": "tensor_group", "symmetric": true, "type": "float",
    "zp_dtype": null})"));
  const auto i = nlohmann::json::parse(nv.input_activations->to_json());
  EXPECT_EQ(i["dynamic"], "local");
  EXPECT_EQ(i["observer"], "static_minmax");
  QuantizationArgs asym;
  asym.symmetric = false;
  const auto aj = nlohmann::json::parse(asym.validated().to_json());
  EXPECT_EQ(aj["zp_dtype"], "torch.int8");
  EXPECT_EQ(aj["strategy"], "tensor");
  EXPECT_EQ(aj["type"], "int");
  EXPECT_EQ(aj["dynamic"], false);
  const auto mx = nlohmann::json::parse(preset_scheme("MXFP4").weights->to_json());
  EXPECT_EQ(mx["scale_dtype"], "torch.uint8");
  EXPECT_TRUE(mx["zp_dtype"].is_null()) << "symmetric -> null even though uint8 in memory";
  const auto tok = nlohmann::json::parse(preset_scheme("W8A8").input_activations->to_json());
  EXPECT_EQ(tok["dynamic"], true);
  EXPECT_TRUE(tok["observer"].is_null());
  const auto blk = nlohmann::json::parse(preset_scheme("FP8_BLOCK").weights->to_json());
  EXPECT_EQ(blk["block_structure"], nlohmann::json::parse("[128, 128]"));
}

TEST(Args, R1_3_5_JsonRoundTrip) {
  std::vector<QuantizationArgs> cases;
  for (const auto& name : preset_names()) {
    const auto s = preset_scheme(name);
    for (const auto* a : {&s.weights, &s.input_activations}) {
      if (!a->has_value()) continue;
      // Symmetric args whose zp_dtype differs from the inferred one cannot round-trip:
      // zp_dtype serializes as null (MX uint8).
      QuantizationArgs probe = **a;
      probe.zp_dtype.reset();
      if ((*a)->symmetric && probe.validated().zp_dtype != (*a)->zp_dtype) continue;
      cases.push_back(**a);
    }
  }
  QuantizationArgs asym;
  asym.symmetric = false;
  asym.group_size = 64;
  asym.actorder = ActOrder::kDynamic;
  asym.observer = "mse";
  asym.observer_kwargs = {{"maxshrink", 0.3}, {"patience", int64_t{2}}, {"strict", true}, {"note", std::string("x")}};
  cases.push_back(asym.validated());
  QuantizationArgs f8;
  f8.type = QuantType::kFloat;
  f8.symmetric = false;
  f8.strategy = Strategy::kChannel;
  f8.actorder = ActOrder::kStatic;
  cases.push_back(f8.validated());
  ASSERT_GT(cases.size(), 20u);
  for (const auto& a : cases) {
    SCOPED_TRACE(a.to_json());
    const auto b = QuantizationArgs::from_json(a.to_json());
    EXPECT_EQ(b, a);
    EXPECT_EQ(b.to_json(), a.to_json());
    EXPECT_EQ(b.actorder, a.actorder) << "spelling preserved";
  }
}

// ---- R1.4 schemes -----------------------------------------------------------------------

TEST(Args, R1_4_2_SchemeRules) {
  QuantizationScheme s;
  s.targets = {"Linear"};
  QuantizationArgs ch;
  ch.strategy = Strategy::kChannel;
  s.input_activations = ch;
  EXPECT_THROW(s.validated(), NotImplementedError);
  QuantizationArgs ao;
  ao.group_size = 128;
  ao.actorder = ActOrder::kGroup;
  s.input_activations = ao;
  EXPECT_THROW(s.validated(), InvalidArgument);
  s.input_activations.reset();
  s.output_activations = ao;
  EXPECT_THROW(s.validated(), InvalidArgument);
  s.output_activations.reset();
  s.format = "mixed-precision";
  EXPECT_THROW(s.validated(), InvalidArgument);
  EXPECT_THROW(QuantizationScheme::from_json(R"({"weights": null})"), InvalidArgument) << "targets required";
}

// ---- R1.5 presets -----------------------------------------------------------------------

TEST(Args, R1_5_1_PresetNamesExactList) {
  const std::vector<std::string> expected{
      "UNQUANTIZED", "W2A4",      "W2A8",     "W2A16",   "W3A4",        "W3A8",      "W3A16",    "W4A4",  "W4A8",
      "W4A16",       "W5A8",      "W5A16",    "W6A8",    "W6A16",       "W7A8",      "W7A16",    "W8A16", "W4A16_ASYM",
      "W8A8",        "INT8",      "W4AFP8",   "FP8",     "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "NVFP4", "MXFP4A16",
      "MXFP4",       "MXFP4XFP8", "MXFP6A16", "MXFP6A8", "MXFP8A16",    "MXFP8"};
  EXPECT_EQ(preset_names(), expected);
}

TEST(Args, R1_5_1_EveryPresetCaseInsensitiveAndFresh) {
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    std::string lower = name;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string mixed = lower;
    mixed[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(mixed[0])));
    EXPECT_TRUE(is_preset_name(lower));
    const auto a = preset_scheme(name, {"Linear"});
    EXPECT_EQ(preset_scheme(lower, {"Linear"}), a);
    EXPECT_EQ(preset_scheme(mixed, {"Linear"}), a);
    EXPECT_EQ(a.targets, std::vector<std::string>{"Linear"});
    // Fresh copy: mutating one result does not affect the next.
    auto m = preset_scheme(name);
    if (m.weights) m.weights->num_bits = 3, m.weights->observer_kwargs["x"] = 1.0;
    m.targets.push_back("Other");
    EXPECT_EQ(preset_scheme(name, {"Linear"}), a);
  }
  EXPECT_THROW(preset_scheme("W9A16"), UnknownName);
  EXPECT_THROW(preset_scheme("nvfp5"), UnknownName);
  EXPECT_FALSE(is_preset_name("W1A16"));
}

TEST(Args, R1_5_1_PresetTable) {
  for (int b = 2; b <= 8; ++b) {
    const auto s = preset_scheme("W" + std::to_string(b) + "A16");
    ASSERT_TRUE(s.weights);
    EXPECT_EQ(s.weights->num_bits, b);
    EXPECT_EQ(s.weights->type, QuantType::kInt);
    EXPECT_EQ(s.weights->group_size, 128);
    EXPECT_EQ(s.weights->get_strategy(), Strategy::kGroup);
    EXPECT_TRUE(s.weights->symmetric);
    EXPECT_EQ(s.weights->dynamic, Dynamic::kFalse);
    EXPECT_EQ(s.weights->observer, "memoryless_minmax");
    EXPECT_FALSE(s.input_activations);
  }
  for (const char* n : {"W2A4", "W3A4", "W4A4"}) {
    const auto s = preset_scheme(n);
    ASSERT_TRUE(s.input_activations);
    EXPECT_EQ(s.input_activations->num_bits, 4);
    EXPECT_EQ(s.input_activations->get_strategy(), Strategy::kToken);
    EXPECT_EQ(s.input_activations->dynamic, Dynamic::kTrue);
    EXPECT_FALSE(s.input_activations->observer.has_value());
  }
  for (int b = 2; b <= 7; ++b) {
    const auto s = preset_scheme("W" + std::to_string(b) + "A8");
    ASSERT_TRUE(s.input_activations);
    EXPECT_EQ(s.input_activations->num_bits, 8);
    EXPECT_EQ(s.input_activations->type, QuantType::kInt);
  }
  const auto asym = preset_scheme("W4A16_ASYM");
  EXPECT_FALSE(asym.weights->symmetric);
  EXPECT_EQ(asym.weights->group_size, 128);
  for (const char* n : {"W8A8", "INT8"}) {
    const auto s = preset_scheme(n);
    EXPECT_EQ(s.weights->get_strategy(), Strategy::kChannel);
    EXPECT_EQ(s.weights->num_bits, 8);
    EXPECT_EQ(s.input_activations->get_strategy(), Strategy::kToken);
    EXPECT_EQ(s.input_activations->dynamic, Dynamic::kTrue);
  }
  const auto w4afp8 = preset_scheme("W4AFP8");
  EXPECT_EQ(w4afp8.weights->num_bits, 4);
  EXPECT_EQ(w4afp8.input_activations->type, QuantType::kFloat);
  EXPECT_EQ(w4afp8.input_activations->get_strategy(), Strategy::kToken);
  const auto fp8 = preset_scheme("FP8");
  EXPECT_EQ(fp8.weights->type, QuantType::kFloat);
  EXPECT_EQ(fp8.weights->get_strategy(), Strategy::kTensor);
  EXPECT_EQ(fp8.weights->observer, "memoryless_minmax");
  EXPECT_EQ(fp8.input_activations->get_strategy(), Strategy::kTensor);
  EXPECT_EQ(fp8.input_activations->dynamic, Dynamic::kFalse);
  EXPECT_EQ(fp8.input_activations->observer, "static_minmax");
  const auto fp8d = preset_scheme("FP8_DYNAMIC");
  EXPECT_EQ(fp8d.weights->get_strategy(), Strategy::kChannel);
  EXPECT_EQ(fp8d.input_activations->get_strategy(), Strategy::kToken);
  const auto fp8b = preset_scheme("FP8_BLOCK");
  EXPECT_EQ(fp8b.weights->get_strategy(), Strategy::kBlock);
  EXPECT_EQ(fp8b.weights->block_structure, (std::array<int64_t, 2>{128, 128}));
  EXPECT_EQ(fp8b.input_activations->get_strategy(), Strategy::kGroup);
  EXPECT_EQ(fp8b.input_activations->group_size, 128);
  EXPECT_EQ(fp8b.input_activations->dynamic, Dynamic::kTrue);
  for (const char* n : {"NVFP4A16", "NVFP4"}) {
    const auto s = preset_scheme(n);
    EXPECT_TRUE(s.weights->is_fp4());
    EXPECT_EQ(s.weights->get_strategy(), Strategy::kTensorGroup);
    EXPECT_EQ(s.weights->group_size, 16);
    EXPECT_EQ(s.weights->scale_dtype, DType::kF8E4M3);
    EXPECT_EQ(s.weights->zp_dtype, DType::kF8E4M3);
    EXPECT_EQ(s.weights->observer, "memoryless_minmax");
    EXPECT_EQ(s.input_activations.has_value(), std::string(n) == "NVFP4");
  }
  const auto nv = preset_scheme("NVFP4");
  EXPECT_EQ(nv.input_activations->dynamic, Dynamic::kLocal);
  EXPECT_EQ(nv.input_activations->observer, "static_minmax");
  EXPECT_EQ(nv.input_activations->scale_dtype, DType::kF8E4M3);
  for (const char* n : {"MXFP4A16", "MXFP4"}) {
    const auto s = preset_scheme(n);
    EXPECT_TRUE(s.weights->is_fp4());
    EXPECT_EQ(s.weights->get_strategy(), Strategy::kGroup);
    EXPECT_EQ(s.weights->group_size, 32);
    EXPECT_EQ(s.weights->scale_dtype, DType::kU8);
    EXPECT_EQ(s.weights->zp_dtype, DType::kU8);
    EXPECT_TRUE(s.weights->is_mx());
  }
  const auto mx4 = preset_scheme("MXFP4");
  EXPECT_EQ(mx4.input_activations->dynamic, Dynamic::kTrue);
  EXPECT_EQ(mx4.input_activations->group_size, 32);
  EXPECT_EQ(mx4.input_activations->zp_dtype, DType::kU8);
  for (const char* n : {"MXFP8A16", "MXFP8"}) {
    const auto s = preset_scheme(n);
    EXPECT_EQ(s.weights->num_bits, 8);
    EXPECT_EQ(s.weights->type, QuantType::kFloat);
    EXPECT_EQ(s.weights->group_size, 32);
    EXPECT_EQ(s.weights->scale_dtype, DType::kU8);
    EXPECT_TRUE(s.weights->is_mx());
  }
  EXPECT_EQ(preset_scheme("MXFP8").input_activations->dynamic, Dynamic::kTrue);
  const auto un = preset_scheme("unquantized");
  EXPECT_FALSE(un.weights || un.input_activations || un.output_activations);
}

// ---- R1.6 config ------------------------------------------------------------------------

QuantizationConfig config_of(std::vector<std::pair<std::string, QuantizationScheme>> groups) {
  QuantizationConfig c;
  c.config_groups = std::move(groups);
  return c;
}

TEST(Args, R1_6_1_ConfigDefaultsAndPresetExpansion) {
  const auto c = QuantizationConfig::from_json(R"({"config_groups": {"W4A16": ["Linear"]}, "unknown_key": 1})");
  ASSERT_EQ(c.config_groups.size(), 1u);
  EXPECT_EQ(c.config_groups[0].second, preset_scheme("W4A16", {"Linear"}));
  EXPECT_EQ(c.quant_method, "compressed-tensors");
  EXPECT_EQ(c.format, "fakequant");
  EXPECT_EQ(c.quantization_status, QuantizationStatus::kInitialized);
  EXPECT_TRUE(c.ignore.empty());
  EXPECT_FALSE(c.kv_cache_scheme.has_value());
}

TEST(Args, R1_6_2_RequiresCalibrationData) {
  for (const char* n :
       {"W4A16", "W8A8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "MXFP4", "MXFP8", "W4AFP8", "UNQUANTIZED"}) {
    SCOPED_TRACE(n);
    EXPECT_FALSE(config_of({{"group_0", preset_scheme(n)}}).requires_calibration_data());
  }
  for (const char* n : {"FP8", "NVFP4"}) {
    SCOPED_TRACE(n);
    EXPECT_TRUE(config_of({{"group_0", preset_scheme(n)}}).requires_calibration_data());
  }
  // imatrix_mse weights.
  auto im = preset_scheme("W4A16");
  im.weights->observer = "imatrix_mse";
  EXPECT_TRUE(config_of({{"group_0", im}}).requires_calibration_data());
  // Static output activations.
  auto out = preset_scheme("W4A16");
  QuantizationArgs o;
  out.output_activations = o.validated();
  EXPECT_TRUE(config_of({{"group_0", out}}).requires_calibration_data());
  // Dynamic output activations need no data.
  QuantizationArgs od;
  od.strategy = Strategy::kToken;
  od.dynamic = Dynamic::kTrue;
  out.output_activations = od.validated();
  EXPECT_FALSE(config_of({{"group_0", out}}).requires_calibration_data());
  // kv-cache scheme.
  auto kv = config_of({{"group_0", preset_scheme("W4A16")}});
  kv.kv_cache_scheme = QuantizationArgs{}.validated();
  EXPECT_TRUE(kv.requires_calibration_data());
  // One group needing data is enough.
  EXPECT_TRUE(config_of({{"a", preset_scheme("W4A16")}, {"b", preset_scheme("FP8")}}).requires_calibration_data());
}

TEST(Args, R1_6_3_ModuleTypeForIgnore) {
  EXPECT_EQ(module_type_for_ignore("DeepseekV4TopKRouter"), "Linear");
  EXPECT_EQ(module_type_for_ignore("JetMoeTopKGating"), "Linear");
  EXPECT_EQ(module_type_for_ignore("Qwen3NextGatedDeltaNet"), "Linear");
  EXPECT_EQ(module_type_for_ignore("MixtralGate"), "Linear");
  EXPECT_EQ(module_type_for_ignore("ExpertMLPWithGate"), "ExpertMLPWithGate");
  EXPECT_EQ(module_type_for_ignore("LlamaMLP"), "LlamaMLP");
  EXPECT_EQ(module_type_for_ignore("Linear"), "Linear");
}

TEST(Args, R1_6_4_Merge) {
  auto a = config_of({{"group_0", preset_scheme("W4A16", {"Linear"})}});
  a.ignore = {"lm_head", "re:.*gate", "Embedding"};
  a.quantization_status = QuantizationStatus::kCalibration;
  auto b = config_of({{"group_0", preset_scheme("FP8", {"lm_head"})}});
  b.quantization_status = QuantizationStatus::kFrozen;
  a.merge(b);
  EXPECT_EQ(a.ignore, (std::vector<std::string>{"re:.*gate", "Embedding"}));
  ASSERT_EQ(a.config_groups.size(), 2u);
  EXPECT_NE(a.config_groups[0].first, a.config_groups[1].first);
  EXPECT_EQ(a.quantization_status, QuantizationStatus::kFrozen);
}

// ---- R8.1.2 format inference ------------------------------------------------------------

TEST(Args, R8_1_2_InferCompressionFormatPresets) {
  const std::pair<const char*, const char*> cases[] = {
      {"W4A16", "pack-quantized"},        {"W8A16", "pack-quantized"},
      {"W2A16", "pack-quantized"},        {"W4A16_ASYM", "pack-quantized"},
      {"W8A8", "int-quantized"},          {"INT8", "int-quantized"},
      {"W4A8", "int-quantized"},          {"W4A4", "int-quantized"},
      {"W4AFP8", "int-quantized"},        {"FP8", "float-quantized"},
      {"FP8_DYNAMIC", "float-quantized"}, {"FP8_BLOCK", "float-quantized"},
      {"NVFP4", "nvfp4-pack-quantized"},  {"NVFP4A16", "nvfp4-pack-quantized"},
      {"MXFP4", "mxfp4-pack-quantized"},  {"MXFP4A16", "mxfp4-pack-quantized"},
      {"MXFP8", "mxfp8-quantized"},       {"MXFP8A16", "mxfp8-quantized"},
  };
  for (const auto& [preset, fmt] : cases) EXPECT_EQ(infer_compression_format(preset_scheme(preset)), fmt) << preset;
}

TEST(Args, R8_1_2_InferCompressionFormatRules) {
  QuantizationScheme s;
  s.targets = {"Linear"};
  EXPECT_EQ(infer_compression_format(s), "dense");
  // FP8 weight-only -> naive.
  QuantizationArgs f8;
  f8.type = QuantType::kFloat;
  s.weights = f8.validated();
  EXPECT_EQ(infer_compression_format(s), "naive-quantized");
  // int > 8 bits weight-only -> naive.
  s.weights = int_args(16).validated();
  EXPECT_EQ(infer_compression_format(s), "naive-quantized");
  // Q29: FP4 group 32 without uint8 scales -> mxfp4.
  QuantizationArgs f4;
  f4.num_bits = 4;
  f4.type = QuantType::kFloat;
  f4.group_size = 32;
  s.weights = f4.validated();
  EXPECT_EQ(infer_compression_format(s), "mxfp4-pack-quantized");
  // FP8 group 32 without uint8 scales is not mxfp8.
  QuantizationArgs f8g;
  f8g.type = QuantType::kFloat;
  f8g.group_size = 32;
  s.weights = f8g.validated();
  EXPECT_EQ(infer_compression_format(s), "naive-quantized");
  // Rule 4 catches int weights with float inputs; rule 5 int weights with int inputs
  // never reaches pack (rule 4 first).
  s.weights = int_args(16).validated();
  s.input_activations = preset_scheme("W8A8").input_activations;
  EXPECT_EQ(infer_compression_format(s), "int-quantized");
  // FP4 group 16 -> nvfp4 even with group strategy.
  QuantizationArgs g16;
  g16.num_bits = 4;
  g16.type = QuantType::kFloat;
  g16.group_size = 16;
  s.weights = g16.validated();
  s.input_activations.reset();
  EXPECT_EQ(infer_compression_format(s), "nvfp4-pack-quantized");
  // An explicit format overrides inference.
  s.weights = int_args(4).validated();
  s.format = "int-quantized";
  EXPECT_EQ(infer_compression_format(s), "int-quantized");
}

}  // namespace
// Found by the args fuzzer: a field of the wrong JSON type escaped as nlohmann's
// type_error (not a qobs error, so Python saw a bare RuntimeError).
TEST(Args, R1_6_1_WrongJsonTypesAreInvalidArgument) {
  expect_error<InvalidArgument>([] { (void)QuantizationScheme::from_json(R"({"targets": [], "format": 1})"); },
                                {"QuantizationScheme.format must be a string, got 1"});
  expect_error<InvalidArgument>([] { (void)QuantizationConfig::from_json(R"({"config_groups": 1})"); },
                                {"config_groups must be an object", "got 1"});
  expect_error<InvalidArgument>([] { (void)QuantizationConfig::from_json(R"({"config_groups": {"W4A16": [1]}})"); },
                                {"config_groups.W4A16 must be a list of strings", "element 1"});
  expect_error<InvalidArgument>([] { (void)QuantizationConfig::from_json(R"({"ignore": [1]})"); },
                                {"QuantizationConfig.ignore must be a list of strings", "element 1"});
  expect_error<InvalidArgument>([] { (void)QuantizationConfig::from_json(R"({"ignore": "lm_head"})"); },
                                {"QuantizationConfig.ignore must be a list of strings"});
  EXPECT_EQ(QuantizationConfig::from_json(R"({"ignore": ["lm_head"], "config_groups": {"W4A16": ["Linear"]}})").ignore,
            std::vector<std::string>{"lm_head"});
}

}  // namespace qobs
