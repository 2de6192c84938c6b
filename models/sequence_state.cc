#include "models/sequence_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace tg {
namespace {

constexpr char kMagic[8] = {'T', 'G', 'S', 'E', 'Q', 'K', 'V', '1'};

// What identifies the model a state belongs to: its shape and its weights' size, FNV-1a.
uint64_t Fingerprint(const LlamaModel& model) {
  const LlamaHParams& hp = model.hparams();
  const int64_t values[] = {
      hp.n_vocab, hp.n_embd,    hp.n_ff,          hp.n_layer,
      hp.n_head,  hp.n_head_kv, hp.head_dim,      hp.n_rot,
      hp.n_swa,   hp.n_expert,  model.n_params(), static_cast<int64_t>(model.weight_bytes())};
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : values) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint8_t>(v >> (8 * i));
      h *= 1099511628211ull;
    }
  }
  return h;
}

// The header after the magic.
struct Header {
  uint64_t fingerprint;
  uint32_t kv_type;
  uint32_t n_layer;
  uint64_t row_bytes;  // one cache row of one layer.
  uint64_t n_tokens;
  uint64_t n_logits;  // 0 or n_vocab.
};

// The cells as runs of consecutive cells: (first cell, first position, count).
struct Run {
  int32_t cell;
  size_t pos;
  size_t count;
};
std::vector<Run> Runs(absl::Span<const int32_t> cells) {
  std::vector<Run> runs;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!runs.empty() && runs.back().cell + static_cast<int32_t>(runs.back().count) == cells[i]) {
      ++runs.back().count;
    } else {
      runs.push_back({cells[i], i, 1});
    }
  }
  return runs;
}

size_t RowBytesOf(const KvCache& cache) { return cache.k(0)->nb[1]; }

template <typename T>
void Append(std::string* out, const T* data, size_t n) {
  out->append(reinterpret_cast<const char*>(data), n * sizeof(T));
}

}  // namespace

absl::StatusOr<SequenceState> CaptureSequence(const KvCache& cache, absl::Span<const int32_t> cells,
                                              absl::Span<const int32_t> tokens,
                                              absl::Span<const float> logits) {
  if (cells.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(cells.size(), " cells for ", tokens.size(), " tokens"));
  }
  SequenceState s;
  s.tokens.assign(tokens.begin(), tokens.end());
  s.logits.assign(logits.begin(), logits.end());
  const size_t row = RowBytesOf(cache);
  const std::vector<Run> runs = Runs(cells);
  auto read = [&](const Tensor* t) -> absl::StatusOr<std::string> {
    std::string rows(cells.size() * row, '\0');
    for (const Run& r : runs) {
      TG_RETURN_IF_ERROR(
          t->buffer->GetTensor(t, rows.data() + r.pos * row, r.cell * row, r.count * row));
    }
    return rows;
  };
  for (int64_t il = 0; il < cache.n_layer(); ++il) {
    TG_ASSIGN_OR_RETURN(std::string k, read(cache.k(il)));
    TG_ASSIGN_OR_RETURN(std::string v, read(cache.v(il)));
    s.k_rows.push_back(std::move(k));
    s.v_rows.push_back(std::move(v));
  }
  return s;
}

absl::Status RestoreRows(const SequenceState& state, const KvCache& cache,
                         absl::Span<const int32_t> cells) {
  const size_t row = RowBytesOf(cache);
  for (const Run& r : Runs(cells)) {
    for (int64_t il = 0; il < cache.n_layer(); ++il) {
      TG_RETURN_IF_ERROR(cache.k(il)->buffer->SetTensor(
          cache.k(il), state.k_rows[il].data() + r.pos * row, r.cell * row, r.count * row));
      TG_RETURN_IF_ERROR(cache.v(il)->buffer->SetTensor(
          cache.v(il), state.v_rows[il].data() + r.pos * row, r.cell * row, r.count * row));
    }
  }
  return absl::OkStatus();
}

std::string EncodeSequenceState(const LlamaModel& model, const KvCache& cache,
                                const SequenceState& state) {
  const Header h{Fingerprint(model),
                 static_cast<uint32_t>(cache.type()),
                 static_cast<uint32_t>(cache.n_layer()),
                 RowBytesOf(cache),
                 state.tokens.size(),
                 state.logits.size()};
  std::string out(kMagic, sizeof(kMagic));
  Append(&out, &h, 1);
  Append(&out, state.tokens.data(), state.tokens.size());
  Append(&out, state.logits.data(), state.logits.size());
  for (size_t il = 0; il < state.k_rows.size(); ++il) out += state.k_rows[il] + state.v_rows[il];
  return out;
}

absl::StatusOr<SequenceState> DecodeSequenceState(const LlamaModel& model, const KvCache& cache,
                                                  absl::string_view bytes) {
  Header h;
  if (bytes.size() < sizeof(kMagic) + sizeof(h) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("not a tensorgrid sequence state (bad magic or too short)");
  }
  std::memcpy(&h, bytes.data() + sizeof(kMagic), sizeof(h));
  if (h.fingerprint != Fingerprint(model)) {
    return absl::InvalidArgumentError(absl::StrCat("the state was saved with another model (",
                                                   model.Describe(), " has another fingerprint)"));
  }
  if (h.kv_type != static_cast<uint32_t>(cache.type()) || h.row_bytes != RowBytesOf(cache) ||
      h.n_layer != static_cast<uint64_t>(cache.n_layer())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the state's KV cache (%s, %d layers) is not this session's (%s, %d layers)",
        DTypeName(static_cast<DType>(h.kv_type)), h.n_layer, DTypeName(cache.type()),
        cache.n_layer()));
  }
  if (h.n_logits != 0 && h.n_logits != static_cast<uint64_t>(model.hparams().n_vocab)) {
    return absl::InvalidArgumentError(absl::StrCat("the state holds ", h.n_logits, " logits"));
  }
  if (h.n_tokens > static_cast<uint64_t>(cache.n_ctx())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the state holds %d tokens; the cache has %d cells (raise -c)", h.n_tokens, cache.n_ctx()));
  }
  const size_t rows = h.n_tokens * h.row_bytes;
  const size_t want = sizeof(kMagic) + sizeof(h) + h.n_tokens * sizeof(int32_t) +
                      h.n_logits * sizeof(float) + 2 * h.n_layer * rows;
  if (bytes.size() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the state is %d bytes, its header says %d (truncated or damaged)", bytes.size(), want));
  }
  SequenceState s;
  const char* p = bytes.data() + sizeof(kMagic) + sizeof(h);
  s.tokens.resize(h.n_tokens);
  std::memcpy(s.tokens.data(), p, h.n_tokens * sizeof(int32_t));
  p += h.n_tokens * sizeof(int32_t);
  s.logits.resize(h.n_logits);
  std::memcpy(s.logits.data(), p, h.n_logits * sizeof(float));
  p += h.n_logits * sizeof(float);
  for (uint32_t il = 0; il < h.n_layer; ++il) {
    s.k_rows.emplace_back(p, rows);
    s.v_rows.emplace_back(p + rows, rows);
    p += 2 * rows;
  }
  const int64_t n_vocab = model.hparams().n_vocab;
  for (int32_t t : s.tokens) {
    if (t < 0 || t >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("the state holds token ", t, ", outside the vocabulary of ", n_vocab));
    }
  }
  return s;
}

int64_t SharedPrefix(absl::Span<const int32_t> saved, absl::Span<const int32_t> tokens) {
  size_t n = 0;
  while (n < saved.size() && n < tokens.size() && saved[n] == tokens[n]) ++n;
  return static_cast<int64_t>(n);
}

}  // namespace tg
