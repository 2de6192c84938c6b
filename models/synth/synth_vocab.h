// A synthetic SentencePiece (llama.cpp "llama"/SPM) vocabulary of any size: <unk>, <s>, </s>,
// the 256 byte-fallback tokens <0x00>..<0xFF>, then unique pieces ("▁" + common English words,
// letters, then generated letter sequences) with decreasing scores. Deterministic.
#ifndef TENSORGRID_MODELS_SYNTH_SYNTH_VOCAB_H_
#define TENSORGRID_MODELS_SYNTH_SYNTH_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "models/token_type.h"

namespace tg::synth {

// The ids of the special tokens: the vocabulary starts with them, in this order.
enum SpecialTokenId : uint32_t {
  kUnkId,
  kBosId,
  kEosId,
};

struct SpmVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

// Exactly n_vocab tokens; n_vocab must be at least MinSynthVocab() (checked by the caller).
SpmVocab MakeSpmVocab(int64_t n_vocab);

// A synthetic GPT-2 byte-level BPE vocabulary (llama.cpp "gpt2", as gpt-oss's o200k one): the
// 256 byte characters, then the prefixes of the common words (" word" and "Word") each made by
// one merge of the prefix before it and its next character, then unreachable filler tokens,
// then the control tokens <|startoftext|> (bos) and <|endoftext|> (eos). Deterministic.
struct BpeVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // "left right", rank = index.
  uint32_t bos = 0;
  uint32_t eos = 0;
};

// Exactly n_vocab tokens; n_vocab must be at least MinSynthVocab() (checked by the caller).
BpeVocab MakeBpeVocab(int64_t n_vocab);

}  // namespace tg::synth

#endif  // TENSORGRID_MODELS_SYNTH_SYNTH_VOCAB_H_
