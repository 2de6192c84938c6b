// ArgParser: short and long names, inline values, positional arguments (negative numbers
// included), help, usage text, and one clear error per bad argument.
#include "cli/arg_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// argv for Parse: the program name, then `args` (kept alive by the vector of strings).
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : storage_(std::move(args)) {
    storage_.insert(storage_.begin(), "prog");
    for (std::string& s : storage_) pointers_.push_back(s.data());
  }
  int argc() const { return static_cast<int>(pointers_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> storage_;
  std::vector<char*> pointers_;
};

struct Values {
  std::string model;
  int64_t n = 7;
  float temp = 0.5f;
  bool verbose = false;
};

ArgParser MakeParser(Values* v) {
  ArgParser p("prog");
  p.AddString("-m", "--model", &v->model, "model file");
  p.AddInt("-n", "--n-predict", &v->n, "tokens");
  p.AddFloat(nullptr, "--temp", &v->temp, "temperature");
  p.AddBool("-v", "--verbose", &v->verbose, "more output");
  return p;
}

TEST(ArgParserTest, ShortLongAndInlineValues) {
  Values v;
  ArgParser p = MakeParser(&v);
  Argv a({"-m", "a.gguf", "--n-predict=32", "--temp", "0.25", "-v"});
  ASSERT_TRUE(p.Parse(a.argc(), a.argv()).ok());
  EXPECT_EQ(v.model, "a.gguf");
  EXPECT_EQ(v.n, 32);
  EXPECT_FLOAT_EQ(v.temp, 0.25f);
  EXPECT_TRUE(v.verbose);
  EXPECT_FALSE(p.help_requested());
  EXPECT_TRUE(p.positional().empty());
}

TEST(ArgParserTest, UnsetFlagsKeepTheirDefaults) {
  Values v;
  ArgParser p = MakeParser(&v);
  Argv a({"--model", "b.gguf"});
  ASSERT_TRUE(p.Parse(a.argc(), a.argv()).ok());
  EXPECT_EQ(v.n, 7);
  EXPECT_FLOAT_EQ(v.temp, 0.5f);
  EXPECT_FALSE(v.verbose);
}

TEST(ArgParserTest, PositionalArgumentsIncludeNegativeNumbersAndALoneDash) {
  Values v;
  ArgParser p = MakeParser(&v);
  Argv a({"first", "-3", "-m", "x", "-", "-0.5", "last"});
  ASSERT_TRUE(p.Parse(a.argc(), a.argv()).ok());
  EXPECT_THAT(p.positional(), ElementsAre("first", "-3", "-", "-0.5", "last"));
  EXPECT_EQ(v.model, "x");
}

TEST(ArgParserTest, ValuesMayLookLikeFlags) {
  Values v;
  ArgParser p = MakeParser(&v);
  Argv a({"-m", "--verbose", "-n", "-4"});
  ASSERT_TRUE(p.Parse(a.argc(), a.argv()).ok());
  EXPECT_EQ(v.model, "--verbose");  // the value of -m, not the flag.
  EXPECT_FALSE(v.verbose);
  EXPECT_EQ(v.n, -4);
}

TEST(ArgParserTest, HelpIsNoted) {
  for (const char* flag : {"-h", "--help"}) {
    Values v;
    ArgParser p = MakeParser(&v);
    Argv a({flag});
    ASSERT_TRUE(p.Parse(a.argc(), a.argv()).ok());
    EXPECT_TRUE(p.help_requested()) << flag;
  }
}

TEST(ArgParserTest, ErrorsNameTheFlagAndTheValue) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--fast"}, "unknown flag '--fast' (see prog --help)"},
      {{"--fast=1"}, "unknown flag '--fast'"},
      {{"-m"}, "-m needs a value"},
      {{"-n", "ten"}, "--n-predict expects an integer, got 'ten'"},
      {{"--n-predict=1.5"}, "--n-predict expects an integer, got '1.5'"},
      {{"--temp", "hot"}, "--temp expects a number, got 'hot'"},
  };
  for (const Case& c : cases) {
    Values v;
    ArgParser p = MakeParser(&v);
    Argv a(c.args);
    const absl::Status s = p.Parse(a.argc(), a.argv());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
  }
}

TEST(ArgParserTest, UsageListsEveryOptionOnce) {
  Values v;
  ArgParser p = MakeParser(&v);
  const std::string usage = p.Usage("[options] FILE");
  EXPECT_THAT(usage, HasSubstr("usage: prog [options] FILE\n"));
  EXPECT_THAT(usage, HasSubstr("-m, --model V"));
  EXPECT_THAT(usage, HasSubstr("--temp V"));
  EXPECT_THAT(usage, HasSubstr("-v, --verbose "));  // a bool takes no value.
  EXPECT_EQ(usage.find("--verbose V"), std::string::npos);
  for (const char* name : {"--model", "--n-predict", "--temp", "--verbose"}) {
    EXPECT_EQ(usage.find(name), usage.rfind(name)) << name;
  }
}

}  // namespace
}  // namespace tg
