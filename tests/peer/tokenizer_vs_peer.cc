// tokenizer_vs_peer: tokenizes a set of tricky prompts with tg::Tokenizer and with llama.cpp
// (peer_harness tokenize) and requires identical ids, on the real stories260K SPM vocabulary
// and on byte-level BPE vocabularies trained here (llama3 "llama-bpe", "qwen2", gpt-oss's
// "gpt-4o", "gpt-2", "default", and the pattern-chain ones: "qwen35", "falcon", "starcoder",
// "deepseek-llm", "deepseek-coder", "gemma4") and written as vocab-only llama
// GGUFs that libllama accepts; then every other tokenizer.ggml.pre name we accept, on the
// vocabulary of the splitter we map it to, so that a name llama.cpp maps elsewhere differs.
//
//   tokenizer_vs_peer PEER_HARNESS [WORK_DIR]     (ctest passes both; the build gives the path
//                                                  demo/stories260K.gguf)
// $TG_PEER_FUZZ_PROMPTS=N adds N random prompts (fixed seed) to the fixed ones.
// Exit: 0 all identical, 1 a mismatch or error, 77 (ctest SKIP_RETURN_CODE) nothing to compare.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "models/shared_model_path.h"
#include "models/token_type.h"
#include "models/tokenizer.h"
#include "models/tokenizer_bpe.h"
#include "models/unicode.h"

namespace tg {
namespace {

constexpr int kExitSkip = 77;
constexpr int kLlama3Merges = 400;
constexpr int kQwen2Merges = 300;
constexpr int kGpt2Merges = 300;
constexpr int kGpt4oMerges = 400;
constexpr uint32_t kFuzzSeed = 20250601;
constexpr int kMaxFuzzFragments = 12;
constexpr int kMaxReportedPieces = 10;
// Names we accept that llama.cpp refuses to load ("unknown pre-tokenizer type"): aliases of
// ours with nothing to compare against.
constexpr const char* kNamesOnlyOurs[] = {"gpt2"};

std::vector<std::string> FixedPrompts() {
  return {
      "Once upon a time",
      "Hello, world!",
      "  leading spaces",
      "trailing spaces   ",
      "multiple    inner     spaces and a single trailing ",
      "line one\nline two\n\nline four\r\nend\n",
      "\tindented\twith\t\ttabs",
      "digits 1234567 and 3.14159, 42, 0x1F, 1,000,000",
      "punctuation!!! ...?! (a[b]{c}) <x/> @#$%^&*_+=~`|\\ \"quoted\" 'single'",
      "contractions: I'm, you're, WE'LL, it's, DON'T, they've, he'd, 'tis",
      "accents: café, naïve, Zoë, Ünïcödé, señor, Ångström, façade",
      "CJK: 你好，世界！日本語のテキスト 한국어 텍스트",
      "emoji: 😀👍🏽 🇫🇷 ❤️ 🧑‍💻 done",
      "cases: HelloWorld camelCase HTTPServer iPhone ÜBER HelloWÖRLD ÉCOLE éA Aé",
      "marks: cafe\u0301s e\u0301 x\u00A0y\u3000\u3000z",
      "slashes: end.\n\nNext!!\n/x http://x.com/a a/b //\n// one!\n/two!\n/three",
      "scripts: Привет мир Ωμέγα Ｆｕｌｌ　ｗｉｄｔｈ ‘quotes’ “double” ２０２４年 ǅ ﬁ",
      "",
      " ",
      "special texts stay text: <|eot_id|> <|im_end|> </s> <s> and a <tool> tag",
      "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst "
      "of times; it was the age of wisdom, it was the age of foolishness. Meanwhile, in the "
      "code: for (int i = 0; i < n; ++i) { total += values[i] * 2; } // done\n"
      "  return total;\nNumbers like 2024-06-01 and 98.6% appear too, as do naïve cafés "
      "and 東京 and emoji 🎉.",
  };
}

// Fragments random prompts are made of: every class the pre-tokenizers tell apart, the
// contraction and digit-group edges, odd whitespace, combining marks and malformed UTF-8.
constexpr const char* kFragments[] = {
    " ",    "  ",     "\n",         "\r\n",   "\t",         "\r",       "'s",     "'T",
    "'re",  "'LL",    "'",          "a",      "Zy",         "the",      "é",      "ß",
    "İ",    "你好",   "テ",         "한",     "😀",          "👍🏽", "🇫🇷",     "0",
    "12",   "345",    "٣",          "Ⅻ",      "½",          "!",        "...",    "$",
    "+=",   "<",      "|",          "`",      "~",          "^",        "—",      "«»",
    "€",    "\u00A0", "\u3000",     "\u2028", "\u0085",     "\u0301",   "\u200B", "\xC3",
    "\xFF", "\x80",   "\xE2\x82",   "<tool>", "<|eot_id|>", "\\",       "\\n",    "\x7F",
    "\x01", "/",      "HTTPServer", "ÜBER",   "camelCase"};

// FixedPrompts plus $TG_PEER_FUZZ_PROMPTS random ones (deterministic: fixed seed).
const std::vector<std::string>& Prompts() {
  static const auto* prompts = [] {
    auto* p = new std::vector<std::string>(FixedPrompts());
    const char* env = std::getenv("TG_PEER_FUZZ_PROMPTS");
    int n = 0;
    if (env == nullptr || !absl::SimpleAtoi(env, &n)) n = 0;
    std::mt19937 rng(kFuzzSeed);
    for (int i = 0; i < n; ++i) {
      std::string prompt;
      const int len = std::uniform_int_distribution<int>(1, kMaxFuzzFragments)(rng);
      for (int j = 0; j < len; ++j) {
        prompt +=
            kFragments[std::uniform_int_distribution<size_t>(0, std::size(kFragments) - 1)(rng)];
      }
      p->push_back(prompt);
    }
    return p;
  }();
  return *prompts;
}

// English, code and a little of other scripts, so that merges cover all of them.
constexpr char kCorpus[] = R"(Once upon a time, there was a little girl named Lily. She loved
to play outside in the sunshine. One day, she saw a big, red ball in the park. "Can I play
with it?" she asked her mom. Her mom said, "Yes, but be careful!" They're happy; we'll see.
It's the best thing I've ever done, and I'd do it again. DON'T STOP, she said. The end.
The quick brown fox jumps over the lazy dog. 1234567890 and 3.14159, 42 times 7 is 294.
def tokenize(text):
    for i in range(len(text)):
        if text[i] == ' ':
            yield i
int main(int argc, char** argv) { return argc > 1 ? 0 : 1; }  // comment
std::vector<int32_t> ids = tokenizer.Encode("hello world", true);
café naïve résumé Zoë Ünïcödé señor Ångström façade déjà vu
你好，世界！你好世界。日本語のテキストです。한국어 텍스트입니다.
emoji 😀 😀 👍 👍 🎉 🎉 done done
HelloWorld camelCase HTTPServer ÜBER WÖRLD http://x.com/a/b
gpt-4o keeps slashes after newlines: one!
/two!
/three!
/four!
/
)";

std::string ByteLevel(absl::string_view raw) {
  std::string out;
  for (char c : raw) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

struct TrainedBpe {
  std::vector<std::string> tokens;  // the 256 byte characters, then merged tokens.
  std::vector<std::string> merges;  // "left right", rank = index.
};

using Word = std::vector<std::string>;  // byte-level symbols.

// The pair counts of all words; std::map so that ties resolve the same way every run.
std::map<std::pair<std::string, std::string>, int> CountPairs(const std::map<Word, int>& words) {
  std::map<std::pair<std::string, std::string>, int> pairs;
  for (const auto& [word, count] : words) {
    for (size_t i = 1; i < word.size(); ++i) pairs[{word[i - 1], word[i]}] += count;
  }
  return pairs;
}

Word ApplyMerge(const Word& word, const std::string& left, const std::string& right) {
  Word out;
  for (size_t i = 0; i < word.size(); ++i) {
    if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
      out.push_back(left + right);
      ++i;
    } else {
      out.push_back(word[i]);
    }
  }
  return out;
}

// A tiny deterministic BPE trainer: words from the pre-tokenizer, then repeatedly the most
// frequent adjacent pair (smallest pair on ties) merges, until n_merges or every word is
// one symbol. Pairs seen once merge too: the small corpus then yields whole-word tokens.
TrainedBpe TrainBpe(BpePreTokenizer pre, int n_merges) {
  TrainedBpe bpe;
  for (int b = 0; b < 256; ++b) bpe.tokens.push_back(ByteLevel(std::string(1, char(b))));
  std::map<Word, int> words;
  for (const std::string& w : PreTokenize(pre, kCorpus)) {
    Word symbols;
    for (char c : w) symbols.push_back(ByteLevel(std::string(1, c)));
    ++words[symbols];
  }
  std::set<std::string> known(bpe.tokens.begin(), bpe.tokens.end());
  for (int m = 0; m < n_merges; ++m) {
    const auto pairs = CountPairs(words);
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (best == pairs.end() || it->second > best->second) best = it;
    }
    if (best == pairs.end()) break;  // every word is one symbol.
    const auto [left, right] = best->first;
    bpe.merges.push_back(absl::StrCat(left, " ", right));
    if (known.insert(left + right).second) bpe.tokens.push_back(left + right);
    std::map<Word, int> merged;
    for (const auto& [word, count] : words) merged[ApplyMerge(word, left, right)] += count;
    words = std::move(merged);
  }
  return bpe;
}

// Adds whole-word tokens that no merge produces: llama3 (ignore_merges) must take them as
// they are, qwen2 must never produce them.
void AddUnmergedWordTokens(TrainedBpe* bpe) {
  for (const char* word : {" brown", " fox", " wisdom", " foolishness", "Meanwhile", " cafés",
                           " 東京", " values", "12"}) {
    const std::string text = ByteLevel(word);
    if (std::find(bpe->tokens.begin(), bpe->tokens.end(), text) == bpe->tokens.end()) {
      bpe->tokens.push_back(text);
    }
  }
}

// A vocab-only llama GGUF: the hyperparameters libllama insists on, then the vocabulary.
absl::Status WriteBpeGguf(const std::string& path, absl::string_view pre, const TrainedBpe& bpe,
                          const std::vector<std::pair<std::string, int32_t>>& specials,
                          absl::string_view bos, absl::string_view eos, bool add_bos) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("general.name", absl::StrCat("tokenizer_vs_peer ", pre));
  w.SetU32("llama.context_length", 256);
  w.SetU32("llama.embedding_length", 64);
  w.SetU32("llama.block_count", 1);
  w.SetU32("llama.feed_forward_length", 128);
  w.SetU32("llama.attention.head_count", 4);
  w.SetU32("llama.attention.head_count_kv", 4);
  w.SetU32("llama.rope.dimension_count", 16);
  w.SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::vector<std::string> tokens = bpe.tokens;
  std::vector<int32_t> types(tokens.size(), kTokenTypeNormal);
  for (const auto& [text, type] : specials) {
    tokens.push_back(text);
    types.push_back(type);
  }
  auto id_of = [&](absl::string_view text) {
    return static_cast<uint32_t>(std::find(tokens.begin(), tokens.end(), text) - tokens.begin());
  };
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", pre);
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetI32Array("tokenizer.ggml.token_type", types);
  w.SetStringArray("tokenizer.ggml.merges", bpe.merges);
  w.SetU32("tokenizer.ggml.bos_token_id", id_of(bos));
  w.SetU32("tokenizer.ggml.eos_token_id", id_of(eos));
  w.SetBool("tokenizer.ggml.add_bos_token", add_bos);
  return w.WriteFile(path);
}

// \n \r \t \\ escaped, as peer_harness reads prompts; with `hex_controls` also the other
// control bytes as \xHH, as it writes pieces.
std::string Escape(absl::string_view s, bool hex_controls = false) {
  std::string out;
  for (char c : s) {
    const uint8_t b = static_cast<uint8_t>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (hex_controls && (b < 0x20 || b == 0x7F)) {
      absl::StrAppendFormat(&out, "\\x%02X", b);
    } else {
      out += c;
    }
  }
  return out;
}

std::string ShellQuote(absl::string_view s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `cmd` and returns the text after `prefix` of each output line that starts with it.
absl::StatusOr<std::vector<std::string>> RunForLines(const std::string& cmd,
                                                     absl::string_view prefix) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return absl::InternalError(absl::StrCat("cannot run ", cmd));
  std::vector<std::string> lines;
  char* line = nullptr;
  size_t cap = 0;
  while (getline(&line, &cap, pipe) >= 0) {
    absl::string_view l = absl::StripSuffix(line, "\n");
    if (absl::ConsumePrefix(&l, prefix)) lines.emplace_back(l);
  }
  std::free(line);
  if (const int rc = pclose(pipe); rc != 0) {
    return absl::InternalError(absl::StrCat(cmd, ": exit status ", rc));
  }
  return lines;
}

// The peer's ids for every prompt, via `peer_harness tokenize`.
absl::StatusOr<std::vector<std::vector<int32_t>>> PeerTokenize(const std::string& harness,
                                                               const std::string& model,
                                                               const std::string& work_dir) {
  const std::string prompts_path = absl::StrCat(work_dir, "/tokenizer_vs_peer_prompts.txt");
  FILE* f = std::fopen(prompts_path.c_str(), "w");
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", prompts_path));
  for (const std::string& p : Prompts()) std::fprintf(f, "%s\n", Escape(p).c_str());
  std::fclose(f);
  auto lines = RunForLines(absl::StrCat(ShellQuote(harness), " tokenize ", ShellQuote(model), " < ",
                                        ShellQuote(prompts_path)),
                           "ids:");
  if (!lines.ok()) return lines.status();
  if (lines->size() != Prompts().size()) {
    return absl::InternalError(
        absl::StrCat("peer_harness: ", lines->size(), " results for ", Prompts().size()));
  }
  std::vector<std::vector<int32_t>> all;
  for (const std::string& l : *lines) {
    std::vector<int32_t>& ids = all.emplace_back();
    for (absl::string_view t : absl::StrSplit(l, ' ', absl::SkipEmpty())) {
      if (!absl::SimpleAtoi(t, &ids.emplace_back())) {
        return absl::InternalError(absl::StrCat("peer_harness: bad id ", t));
      }
    }
  }
  return all;
}

// Compares TokenToPiece of every token with the peer's (`peer_harness pieces`); returns the
// number of differing tokens.
absl::StatusOr<int> ComparePieces(const std::string& name, const Tokenizer& tok,
                                  const std::string& harness, const std::string& model) {
  auto pieces =
      RunForLines(absl::StrCat(ShellQuote(harness), " pieces ", ShellQuote(model)), "piece: ");
  if (!pieces.ok()) return pieces.status();
  if (pieces->size() != static_cast<size_t>(tok.n_vocab())) {
    return absl::InternalError(
        absl::StrCat("peer_harness: ", pieces->size(), " pieces for ", tok.n_vocab(), " tokens"));
  }
  int mismatches = 0;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const std::string ours = Escape(tok.TokenToPiece(id), /*hex_controls=*/true);
    if (ours == (*pieces)[id]) continue;
    if (++mismatches <= kMaxReportedPieces) {
      std::printf("MISMATCH %s piece of %d\n  ours: \"%s\"\n  peer: \"%s\"\n", name.c_str(), id,
                  ours.c_str(), (*pieces)[id].c_str());
    }
  }
  return mismatches;
}

// Compares ours with the peer on one model file: ids of every prompt and the piece of every
// token; returns the number of differences.
absl::StatusOr<int> Compare(const std::string& name, const std::string& model,
                            const std::string& harness, const std::string& work_dir) {
  auto file = GgufFile::Open(model);
  if (!file.ok()) return file.status();
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) return tok.status();
  auto peer = PeerTokenize(harness, model, work_dir);
  if (!peer.ok()) return peer.status();
  int mismatches = 0;
  size_t n_ids = 0;
  for (size_t i = 0; i < Prompts().size(); ++i) {
    const std::vector<int32_t> ours = (*tok)->Encode(Prompts()[i], /*add_special=*/true);
    n_ids += ours.size();
    if (ours == (*peer)[i]) continue;
    ++mismatches;
    std::printf("MISMATCH %s prompt \"%s\"\n  ours: %s\n  peer: %s\n", name.c_str(),
                Escape(Prompts()[i]).c_str(), absl::StrJoin(ours, " ").c_str(),
                absl::StrJoin((*peer)[i], " ").c_str());
  }
  auto piece_mismatches = ComparePieces(name, **tok, harness, model);
  if (!piece_mismatches.ok()) return piece_mismatches.status();
  std::printf(
      "tokenizer_vs_peer: %-12s %zu/%zu prompts identical (%zu ids), %d/%d pieces identical\n",
      name.c_str(), Prompts().size() - mismatches, Prompts().size(), n_ids,
      (*tok)->n_vocab() - *piece_mismatches, (*tok)->n_vocab());
  return mismatches + *piece_mismatches;
}

// One generated BPE vocabulary: its pre-tokenizer and special tokens.
struct BpeSpec {
  const char* name;
  const char* pre;  // tokenizer.ggml.pre
  BpePreTokenizer kind;
  int n_merges;
  std::vector<std::pair<std::string, int32_t>> specials;
  const char* bos;
  const char* eos;
  bool add_bos;
};

std::vector<BpeSpec> BpeSpecs() {
  return {
      {"llama3-bpe",
       "llama-bpe",
       BpePreTokenizer::kLlama3,
       kLlama3Merges,
       {{"<|begin_of_text|>", kTokenTypeControl},
        {"<|end_of_text|>", kTokenTypeControl},
        {"<|eot_id|>", kTokenTypeControl},
        {"<tool>", kTokenTypeUserDefined},
        // Odd tokens for TokenToPiece: unused and undefined render nothing, a byte token its
        // byte, a normal token outside the byte-level alphabet llama.cpp's [UNK_BYTE_..].
        {"<unused0>", kTokenTypeUnused},
        {"<undefined0>", kTokenTypeUndefined},
        {"<0x41>", kTokenTypeByte},
        {"odd€", kTokenTypeNormal}},
       "<|begin_of_text|>",
       "<|end_of_text|>",
       true},
      {"qwen2-bpe",
       "qwen2",
       BpePreTokenizer::kQwen2,
       kQwen2Merges,
       {{"<|endoftext|>", kTokenTypeControl},
        {"<|im_start|>", kTokenTypeControl},
        {"<|im_end|>", kTokenTypeControl}},
       "<|endoftext|>",
       "<|endoftext|>",
       false},
      // Not asked of us, but cheap: llama.cpp's two other byte-level splitters.
      {"gpt2-bpe",
       "gpt-2",
       BpePreTokenizer::kGpt2,
       kGpt2Merges,
       {{"<|endoftext|>", kTokenTypeControl}},
       "<|endoftext|>",
       "<|endoftext|>",
       false},
      {"default-bpe",
       "default",
       BpePreTokenizer::kDefault,
       kGpt2Merges,
       {{"<|endoftext|>", kTokenTypeControl}},
       "<|endoftext|>",
       "<|endoftext|>",
       false},
      // gpt-oss: o200k_harmony's splitter and some of its control tokens.
      {"gpt4o-bpe",
       "gpt-4o",
       BpePreTokenizer::kGpt4o,
       kGpt4oMerges,
       {{"<|startoftext|>", kTokenTypeControl},
        {"<|endoftext|>", kTokenTypeControl},
        {"<|start|>", kTokenTypeControl},
        {"<|message|>", kTokenTypeControl},
        {"<|end|>", kTokenTypeControl}},
       "<|startoftext|>",
       "<|endoftext|>",
       false},
      // The pre-tokenizers whose steps are split patterns run by our own matcher.
      {"qwen35-bpe",
       "qwen35",
       BpePreTokenizer::kQwen35,
       kQwen2Merges,
       {{"<|endoftext|>", kTokenTypeControl}},
       "<|endoftext|>",
       "<|endoftext|>",
       false},
      {"falcon-bpe",
       "falcon",
       BpePreTokenizer::kFalcon,
       kGpt2Merges,
       {{"<|endoftext|>", kTokenTypeControl}},
       "<|endoftext|>",
       "<|endoftext|>",
       false},
      {"starcoder-bpe",
       "starcoder",
       BpePreTokenizer::kStarcoder,
       kGpt2Merges,
       {{"<|endoftext|>", kTokenTypeControl}},
       "<|endoftext|>",
       "<|endoftext|>",
       false},
      {"deepseek-llm-bpe",
       "deepseek-llm",
       BpePreTokenizer::kDeepseekLlm,
       kGpt2Merges,
       {{"<|endoftext|>", kTokenTypeControl}},
       "<|endoftext|>",
       "<|endoftext|>",
       true},
      // SentencePiece-style BPE on raw UTF-8 (spaces as U+2581): on this byte-level vocabulary
      // most non-ASCII characters and every space fall to absent <0xXX> tokens, alike on both.
      {"gemma4-bpe",
       "gemma4",
       BpePreTokenizer::kGemma4,
       kGpt2Merges,
       {{"<|endoftext|>", kTokenTypeControl}, {"<0x41>", kTokenTypeByte}},
       "<|endoftext|>",
       "<|endoftext|>",
       false},
      {"deepseek-coder-bpe",
       "deepseek-coder",
       BpePreTokenizer::kDeepseekCoder,
       kGpt2Merges,
       {{"<|endoftext|>", kTokenTypeControl}},
       "<|endoftext|>",
       "<|endoftext|>",
       true},
  };
}

// The model files to compare on (name, path): stories260K when present, the generated BPE
// vocabularies, then one file per other accepted tokenizer.ggml.pre name, each with the
// vocabulary of the spec whose splitter the name maps to.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Models(
    const std::string& work_dir) {
  std::vector<std::pair<std::string, std::string>> models;
  const std::string stories = DemoModelPath();
  if (access(stories.c_str(), R_OK) == 0) {
    models.emplace_back("stories260K", stories);
  } else {
    std::printf("tokenizer_vs_peer: skipping stories260K: %s not found\n", stories.c_str());
  }
  const std::vector<BpeSpec> specs = BpeSpecs();
  std::map<BpePreTokenizer, std::pair<const BpeSpec*, TrainedBpe>> by_kind;
  for (const BpeSpec& spec : specs) {
    TrainedBpe bpe = TrainBpe(spec.kind, spec.n_merges);
    AddUnmergedWordTokens(&bpe);
    const std::string path = absl::StrCat(work_dir, "/tokenizer_vs_peer_", spec.name, ".gguf");
    absl::Status st =
        WriteBpeGguf(path, spec.pre, bpe, spec.specials, spec.bos, spec.eos, spec.add_bos);
    if (!st.ok()) return st;
    models.emplace_back(spec.name, path);
    by_kind.try_emplace(spec.kind, &spec, std::move(bpe));
  }
  for (const std::string& pre : BpePreTokenizerNames()) {
    auto kind = ParseBpePreTokenizer(pre);
    if (!kind.ok()) return kind.status();
    auto it = by_kind.find(*kind);
    if (it == by_kind.end()) {
      return absl::InternalError(absl::StrCat("no vocabulary spec for pre-tokenizer ", pre));
    }
    const auto& [spec, bpe] = it->second;
    if (pre == spec->pre) continue;
    if (std::find(std::begin(kNamesOnlyOurs), std::end(kNamesOnlyOurs), pre) !=
        std::end(kNamesOnlyOurs)) {
      std::printf("tokenizer_vs_peer: pre %s: not compared, llama.cpp refuses that name\n",
                  pre.c_str());
      continue;
    }
    const std::string path = absl::StrCat(work_dir, "/tokenizer_vs_peer_pre_", pre, ".gguf");
    absl::Status st =
        WriteBpeGguf(path, pre, bpe, spec->specials, spec->bos, spec->eos, spec->add_bos);
    if (!st.ok()) return st;
    models.emplace_back(absl::StrCat("pre ", pre), path);
  }
  return models;
}

int Run(const std::string& harness, const std::string& work_dir) {
  if (harness.empty() || access(harness.c_str(), X_OK) != 0) {
    std::printf(
        "tokenizer_vs_peer: SKIP: peer harness '%s' not runnable "
        "(run ../shared/peer/llama-cpp-peer.sh setup and reconfigure)\n",
        harness.c_str());
    return kExitSkip;
  }
  auto models = Models(work_dir);
  if (!models.ok()) {
    std::printf("tokenizer_vs_peer: FAIL: %s\n", std::string(models.status().message()).c_str());
    return 1;
  }
  int failures = 0;
  for (const auto& [name, path] : *models) {
    absl::StatusOr<int> mismatches = Compare(name, path, harness, work_dir);
    if (!mismatches.ok()) {
      std::printf("tokenizer_vs_peer: FAIL %s: %s\n", name.c_str(),
                  std::string(mismatches.status().message()).c_str());
      ++failures;
    } else if (*mismatches > 0) {
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  const std::string harness = argc > 1 ? argv[1] : "";
  const std::string work_dir = argc > 2 ? argv[2] : "/tmp";
  return tg::Run(harness, work_dir);
}
