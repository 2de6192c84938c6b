#include "cli/arg_parser.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tg {

namespace {

// A setter that parses the flag's value into *value with `parse`; on failure the error names
// the flag, what it expects and the value given.
template <typename T>
ArgParser::Setter ParsedSetter(const char* long_name, T* value,
                               bool (*parse)(absl::string_view, T*), const char* expected) {
  return [value, long_name, parse, expected](absl::string_view v) {
    if (!parse(v, value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(long_name, " expects ", expected, ", got '", v, "'"));
    }
    return absl::OkStatus();
  };
}

}  // namespace

void ArgParser::Add(const char* short_name, const char* long_name, const char* help,
                    bool takes_value, Setter set) {
  options_.push_back({short_name ? short_name : "", long_name, help, takes_value, std::move(set)});
}

void ArgParser::AddString(const char* short_name, const char* long_name, std::string* value,
                          const char* help) {
  Add(short_name, long_name, help, true, [value](absl::string_view v) {
    *value = std::string(v);
    return absl::OkStatus();
  });
}

void ArgParser::AddInt(const char* short_name, const char* long_name, int64_t* value,
                       const char* help) {
  Add(short_name, long_name, help, true,
      ParsedSetter<int64_t>(long_name, value, &absl::SimpleAtoi<int64_t>, "an integer"));
}

void ArgParser::AddFloat(const char* short_name, const char* long_name, float* value,
                         const char* help) {
  Add(short_name, long_name, help, true,
      ParsedSetter<float>(long_name, value, &absl::SimpleAtof, "a number"));
}

void ArgParser::AddBool(const char* short_name, const char* long_name, bool* value,
                        const char* help) {
  Add(short_name, long_name, help, false, [value](absl::string_view) {
    *value = true;
    return absl::OkStatus();
  });
}

const ArgParser::Option* ArgParser::Find(absl::string_view name) const {
  for (const Option& o : options_) {
    if (name == o.long_name || (!o.short_name.empty() && name == o.short_name)) return &o;
  }
  return nullptr;
}

absl::Status ArgParser::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9')) {
      positional_.emplace_back(arg);
      continue;
    }
    absl::string_view value;
    bool inline_value = false;
    if (const size_t eq = arg.find('=');
        eq != absl::string_view::npos && arg.substr(0, 2) == "--") {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    const Option* o = Find(arg);
    if (o == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", arg, "' (see ", program_, " --help)"));
    }
    if (o->takes_value && !inline_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      value = argv[++i];
    }
    if (absl::Status s = o->set(value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string ArgParser::Usage(absl::string_view synopsis) const {
  std::string out = absl::StrCat("usage: ", program_, " ", synopsis, "\n\noptions:\n");
  for (const Option& o : options_) {
    std::string names =
        o.short_name.empty() ? o.long_name : absl::StrCat(o.short_name, ", ", o.long_name);
    if (o.takes_value) names += " V";
    absl::StrAppendFormat(&out, "  %-28s %s\n", names, o.help);
  }
  return out;
}

}  // namespace tg
