// ArgParser: the tools' small flag parser. Options are registered with their short and long
// names, a value pointer and a help line; Parse() fills the values and returns a one-line
// INVALID_ARGUMENT naming the flag and the bad value (unknown flag, missing value, bad
// number). Positional arguments are collected in order.
#ifndef TENSORGRID_CLI_ARG_PARSER_H_
#define TENSORGRID_CLI_ARG_PARSER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tg {

class ArgParser {
 public:
  explicit ArgParser(std::string program) : program_(std::move(program)) {}

  void AddString(const char* short_name, const char* long_name, std::string* value,
                 const char* help);
  void AddInt(const char* short_name, const char* long_name, int64_t* value, const char* help);
  void AddFloat(const char* short_name, const char* long_name, float* value, const char* help);
  void AddBool(const char* short_name, const char* long_name, bool* value, const char* help);

  // argv[0] is skipped. "-h"/"--help" sets help_requested().
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Usage(absl::string_view synopsis) const;

  // Sets an option from its value (the empty view for a flag that takes none).
  using Setter = std::function<absl::Status(absl::string_view)>;

 private:
  struct Option {
    std::string short_name;
    std::string long_name;
    std::string help;
    bool takes_value;
    Setter set;
  };
  void Add(const char* short_name, const char* long_name, const char* help, bool takes_value,
           Setter set);
  const Option* Find(absl::string_view name) const;

  std::string program_;
  std::vector<Option> options_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

}  // namespace tg

#endif  // TENSORGRID_CLI_ARG_PARSER_H_
