// Unicode helpers for the tokenizers; see unicode.h. The decoder reproduces llama.cpp's
// unicode_cpt_from_utf8 bit for bit, because the BPE pre-tokenizer's splits depend on which
// bytes turn into U+FFFD.
#include "models/unicode.h"

#include <algorithm>
#include <array>

namespace tg {
namespace {

struct CodepointRun {
  uint32_t first;  // the run lasts until the next entry's first codepoint.
  uint8_t cls;     // a CodepointClass value.
};

#include "models/unicode_tables.inc"

constexpr size_t kAsciiLimit = 128;
constexpr uint32_t kCodepointLimit = kMaxCodepoint + 1;
constexpr uint32_t kByteLevelShift = 256;  // GPT-2 maps unprintable bytes to U+0100 upwards.

CodepointClass LookUpClass(uint32_t cpt) {
  const CodepointRun* end = kCodepointRuns + std::size(kCodepointRuns);
  const CodepointRun* it = std::upper_bound(
      kCodepointRuns, end, cpt, [](uint32_t c, const CodepointRun& run) { return c < run.first; });
  return static_cast<CodepointClass>((it - 1)->cls);
}

// ASCII dominates real text, so its classes come from a table built once.
const std::array<CodepointClass, kAsciiLimit>& AsciiClasses() {
  static const std::array<CodepointClass, kAsciiLimit> table = [] {
    std::array<CodepointClass, kAsciiLimit> t{};
    for (uint32_t c = 0; c < kAsciiLimit; ++c) t[c] = LookUpClass(c);
    return t;
  }();
  return table;
}

// True for the bytes GPT-2 keeps as their own codepoint: '!'..'~', U+00A1..U+00AC and
// U+00AE..U+00FF.
bool IsPrintableByte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteLevelMaps {
  std::array<uint32_t, 256> byte_to_cpt{};
  std::array<int16_t, 2 * kByteLevelShift> cpt_to_byte{};  // every mapped codepoint < 512.
};

const ByteLevelMaps& GetByteLevelMaps() {
  static const ByteLevelMaps maps = [] {
    ByteLevelMaps m;
    m.cpt_to_byte.fill(-1);
    uint32_t next_shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = IsPrintableByte(b) ? b : kByteLevelShift + next_shifted++;
      m.byte_to_cpt[b] = cpt;
      m.cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return maps;
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

size_t Utf8SequenceLength(char lead) {
  static constexpr size_t kLengthByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                                     1, 1, 1, 1, 2, 2, 3, 4};
  return kLengthByHighNibble[static_cast<uint8_t>(lead) >> 4];
}

std::vector<uint32_t> DecodeUtf8Lenient(absl::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = s[i];
    if (!(b0 & 0x80)) {
      cpts.push_back(b0);
      i += 1;
    } else if (!(b0 & 0x40)) {  // a stray continuation byte.
      cpts.push_back(kReplacementCharacter);
      i += 1;
    } else if (!(b0 & 0x20)) {
      if (i + 1 >= n || !IsContinuation(s[i + 1])) {
        cpts.push_back(kReplacementCharacter);
        i += 1;
        continue;
      }
      cpts.push_back(((b0 & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu));
      i += 2;
    } else if (!(b0 & 0x10)) {
      if (i + 2 >= n || !IsContinuation(s[i + 1]) || !IsContinuation(s[i + 2])) {
        cpts.push_back(kReplacementCharacter);
        i += 1;
        continue;
      }
      cpts.push_back(((b0 & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu));
      i += 3;
    } else if (!(b0 & 0x08)) {
      if (i + 3 >= n || !IsContinuation(s[i + 1]) || !IsContinuation(s[i + 2]) ||
          !IsContinuation(s[i + 3])) {
        cpts.push_back(kReplacementCharacter);
        i += 1;
        continue;
      }
      cpts.push_back(((b0 & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                     (s[i + 3] & 0x3Fu));
      i += 4;
    } else {  // 0xF8..0xFF never start a sequence.
      cpts.push_back(kReplacementCharacter);
      i += 1;
    }
  }
  return cpts;
}

void AppendUtf8(uint32_t cpt, std::string* out) {
  if (cpt > kMaxCodepoint) cpt = kReplacementCharacter;
  if (cpt <= 0x7F) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

CodepointClass GetCodepointClass(uint32_t cpt) {
  if (cpt < kAsciiLimit) return AsciiClasses()[cpt];
  if (cpt >= kCodepointLimit) return CodepointClass::kUndefined;
  return LookUpClass(cpt);
}

bool IsWhitespace(uint32_t cpt) {
  return std::binary_search(std::begin(kWhitespaceCodepoints), std::end(kWhitespaceCodepoints),
                            cpt);
}

uint32_t ByteToUnicode(uint8_t byte) { return GetByteLevelMaps().byte_to_cpt[byte]; }

int UnicodeToByte(uint32_t cpt) {
  const auto& table = GetByteLevelMaps().cpt_to_byte;
  return cpt < table.size() ? table[cpt] : -1;
}

}  // namespace tg
