#include "tools/tg-gguf/tokenize.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "cli/arg_parser.h"
#include "cli/flag_file.h"
#include "gguf/gguf_file.h"
#include "models/tokenizer.h"

namespace tg::gguf_tool {
namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "tg-gguf: %s\n", message.c_str());
  return code;
}

}  // namespace

int RunTokenize(absl::Span<char* const> args, std::FILE* out) {
  std::string text, text_file;
  bool no_add_special = false, parse_special = false;
  ArgParser p("tg-gguf tokenize");
  p.AddString("-p", "--prompt", &text, "the text");
  p.AddString("-f", "--file", &text_file, "a file holding the text (read as bytes)");
  p.AddBool(nullptr, "--no-add-special", &no_add_special, "no BOS/EOS the vocabulary would add");
  p.AddBool(nullptr, "--parse-special", &parse_special,
            "control tokens written in the text (\"<|im_start|>\") are those tokens");
  // ArgParser skips argv[0]: hand it the subcommand's name there.
  std::vector<char*> argv = {const_cast<char*>("tokenize")};
  argv.insert(argv.end(), args.begin(), args.end());
  if (absl::Status s = p.Parse(static_cast<int>(argv.size()), argv.data()); !s.ok()) {
    return Fail(std::string(s.message()), kExitUsage);
  }
  if (p.help_requested()) {
    std::fputs(p.Usage("FILE (-p TEXT | -f TEXT_FILE) [--no-add-special] [--parse-special]\n\n"
                       "Prints the token ids of the text under FILE's vocabulary on one line.")
                   .c_str(),
               out);
    return 0;
  }
  if (p.positional().size() != 1 || text.empty() == text_file.empty()) {
    return Fail("tokenize needs one FILE and one of -p TEXT or -f TEXT_FILE", kExitUsage);
  }
  if (!text_file.empty()) {
    absl::StatusOr<std::string> read = ReadFlagFile(text_file, "--file");
    if (!read.ok()) return Fail(std::string(read.status().message()), kExitRuntime);
    text = *std::move(read);
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(p.positional()[0]);
  if (!file.ok()) return Fail(std::string(file.status().message()), kExitRuntime);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) return Fail(std::string(tok.status().message()), kExitRuntime);
  const std::vector<int32_t> ids = (*tok)->Encode(text, !no_add_special, parse_special);
  std::fprintf(out, "%s\n", absl::StrJoin(ids, " ").c_str());
  return 0;
}

}  // namespace tg::gguf_tool
