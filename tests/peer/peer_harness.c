// peer_harness: our own small C driver over the prebuilt llama.cpp libraries (the "peer",
// see ../../../shared/peer/llama-cpp-peer.sh), so tests can compare tensorgrid's tokenizer
// and forward pass with llama.cpp's on the same GGUF file. Only public llama.h / ggml API.
//
//   peer_harness tokenize MODEL
//       stdin: one prompt per line, with \n \r \t \\ escapes decoded; stdout per prompt:
//       "ids: 1 403 ..." from llama_tokenize(add_special 1, parse_special 0). Loads the
//       vocabulary only (vocab_only), so the file needs no weights.
//   peer_harness generate MODEL PROMPT N [TOPK]
//       CPU, 2 threads ($TG_PEER_THREADS overrides: ggml's spinning workers crawl when the
//       machine has no idle core for them): prints "prompt_tokens: ...", "top_logits: id logit ..."
//       (TOPK, default 5, after the last prompt token), then greedily generates exactly N tokens
//       (argmax, lowest id on ties, no stop at end-of-generation) and prints "tokens: ..." and
//       "text: ..." (pieces with special tokens rendered, escaped as below).
//   peer_harness pieces MODEL
//       "piece: ..." for every token id in order: llama_token_to_piece(lstrip 0, special 1),
//       escaped as below (vocab_only).
// Output escapes: \n \r \t \\, and \xHH for the other bytes below 0x20 and 0x7F.
//
// The CPU backend variant is loaded with ggml_backend_load_all_from_path from
// $TG_PEER_CPU_DIR, else the directory compiled in as TG_PEER_CPU_DIR_DEFAULT. Set VERBOSE=1
// to see llama.cpp's warnings.
#define _GNU_SOURCE  // getline
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

#ifndef TG_PEER_CPU_DIR_DEFAULT
#define TG_PEER_CPU_DIR_DEFAULT ""
#endif

enum {
  kDefaultTopK = 5,
  kDefaultThreads = 2,
  kMinContext = 256,
  kContextSlack = 16,  // room past prompt + N, so decode never hits the context end.
  kPieceBytes = 256,   // first llama_token_to_piece buffer; grown for longer pieces.
};

static void QuietLog(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (level >= GGML_LOG_LEVEL_WARN && getenv("VERBOSE")) fputs(text, stderr);
}

// Decodes \n \r \t \\ in place (other backslashes stay); returns the new length.
static size_t Unescape(char* s, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == '\\' && i + 1 < n) {
      const char c = s[i + 1];
      const char* from = "nrt\\";
      const char* to = "\n\r\t\\";
      const char* hit = strchr(from, c);
      if (c != '\0' && hit) {
        s[o++] = to[hit - from];
        ++i;
        continue;
      }
    }
    s[o++] = s[i];
  }
  return o;
}

// Writes bytes with \n \r \t \\ and other control bytes (\xHH) escaped, so that any piece
// fits on one output line.
static void PrintEscaped(const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = (unsigned char)s[i];
    if (c == '\n') {
      fputs("\\n", stdout);
    } else if (c == '\r') {
      fputs("\\r", stdout);
    } else if (c == '\t') {
      fputs("\\t", stdout);
    } else if (c == '\\') {
      fputs("\\\\", stdout);
    } else if (c < 0x20 || c == 0x7F) {
      printf("\\x%02X", c);
    } else {
      putchar(c);
    }
  }
}

// The piece of a token with special tokens rendered (special 1, lstrip 0); its length or -1.
static int Piece(const struct llama_vocab* vocab, llama_token id, char** buf, int* cap) {
  int n = llama_token_to_piece(vocab, id, *buf, *cap, 0, 1);
  if (n < 0) {
    *cap = -n;
    *buf = realloc(*buf, (size_t)*cap);
    n = llama_token_to_piece(vocab, id, *buf, *cap, 0, 1);
  }
  return n;
}

// Tokens of text[0, n) (add_special 1, parse_special 0); *count gets their number. NULL on
// failure.
static llama_token* Tokenize(const struct llama_vocab* vocab, const char* text, size_t n,
                             int* count) {
  int cap = (int)n + 8;
  llama_token* toks = malloc(sizeof(llama_token) * cap);
  int got = llama_tokenize(vocab, text, (int32_t)n, toks, cap, 1, 0);
  if (got < 0 && got != INT32_MIN) {  // too small: -got is the size needed.
    cap = -got;
    toks = realloc(toks, sizeof(llama_token) * cap);
    got = llama_tokenize(vocab, text, (int32_t)n, toks, cap, 1, 0);
  }
  if (got < 0) {
    free(toks);
    return NULL;
  }
  *count = got;
  return toks;
}

static void PrintIds(const char* label, const llama_token* toks, int n) {
  fputs(label, stdout);
  for (int i = 0; i < n; ++i) printf(" %d", toks[i]);
  putchar('\n');
}

static struct llama_model* LoadVocabOnly(const char* model_path) {
  struct llama_model_params mp = llama_model_default_params();
  mp.vocab_only = 1;
  struct llama_model* model = llama_model_load_from_file(model_path, mp);
  if (!model) fprintf(stderr, "peer_harness: cannot load %s\n", model_path);
  return model;
}

static int RunPieces(const char* model_path) {
  struct llama_model* model = LoadVocabOnly(model_path);
  if (!model) return 1;
  const struct llama_vocab* vocab = llama_model_get_vocab(model);
  int cap = kPieceBytes;
  char* buf = malloc((size_t)cap);
  for (llama_token id = 0; id < llama_vocab_n_tokens(vocab); ++id) {
    const int n = Piece(vocab, id, &buf, &cap);
    fputs("piece: ", stdout);
    PrintEscaped(buf, n > 0 ? (size_t)n : 0);
    putchar('\n');
  }
  fflush(stdout);
  free(buf);
  llama_model_free(model);
  return 0;
}

static int RunTokenize(const char* model_path) {
  struct llama_model* model = LoadVocabOnly(model_path);
  if (!model) return 1;
  const struct llama_vocab* vocab = llama_model_get_vocab(model);
  char* line = NULL;
  size_t line_cap = 0;
  ssize_t len;
  int rc = 0;
  while ((len = getline(&line, &line_cap, stdin)) >= 0) {
    if (len > 0 && line[len - 1] == '\n') --len;
    const size_t n = Unescape(line, (size_t)len);
    int count = 0;
    llama_token* toks = Tokenize(vocab, line, n, &count);
    if (!toks) {
      fprintf(stderr, "peer_harness: llama_tokenize failed\n");
      rc = 1;
      break;
    }
    PrintIds("ids:", toks, count);
    free(toks);
  }
  fflush(stdout);
  free(line);
  llama_model_free(model);
  return rc;
}

static int ArgMax(const float* logits, int n_vocab) {
  int best = 0;
  for (int i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

// The k largest logits, biggest first (ties: lower id first), as "top_logits: id logit ...".
static void PrintTopLogits(const float* logits, int n_vocab, int k) {
  if (k > n_vocab) k = n_vocab;
  int* top = malloc(sizeof(int) * (k > 0 ? k : 1));
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int i = 0; i < n_vocab; ++i) {
      int used = 0;
      for (int m = 0; m < j && !used; ++m) used = top[m] == i;
      if (!used && (best < 0 || logits[i] > logits[best])) best = i;
    }
    top[j] = best;
  }
  fputs("top_logits:", stdout);
  for (int j = 0; j < k; ++j) printf(" %d %.6f", top[j], logits[top[j]]);
  putchar('\n');
  free(top);
}

static int Threads(void) {
  const char* env = getenv("TG_PEER_THREADS");
  const int n = env ? atoi(env) : 0;
  return n > 0 ? n : kDefaultThreads;
}

static struct llama_context* MakeContext(struct llama_model* model, int n_prompt, int n_gen) {
  struct llama_context_params cp = llama_context_default_params();
  const int need = n_prompt + n_gen + kContextSlack;
  cp.n_ctx = need > kMinContext ? need : kMinContext;
  cp.n_batch = cp.n_ctx;
  cp.n_ubatch = cp.n_ctx;
  cp.n_threads = Threads();
  cp.n_threads_batch = cp.n_threads;
  cp.no_perf = 1;
  // TG_PEER_KV_F32=1: an F32 KV cache and no flash attention, so llama.cpp's attention is exact
  // F32 (its default F16 cache with CPU flash attention rounds Q and the V accumulator to F16,
  // ~4e-3 off an exact result on stories260K).
  const char* kv_f32 = getenv("TG_PEER_KV_F32");
  if (kv_f32 != NULL && strcmp(kv_f32, "1") == 0) {
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }
  return llama_init_from_model(model, cp);
}

// Greedy continuation: feeds each argmax token back one at a time.
static int Generate(struct llama_context* ctx, const struct llama_vocab* vocab, int n_gen,
                    int top_k, llama_token* prompt, int n_prompt) {
  const int n_vocab = llama_vocab_n_tokens(vocab);
  if (llama_decode(ctx, llama_batch_get_one(prompt, n_prompt))) return 1;
  PrintTopLogits(llama_get_logits_ith(ctx, -1), n_vocab, top_k);
  llama_token* out = malloc(sizeof(llama_token) * (n_gen > 0 ? n_gen : 1));
  for (int i = 0; i < n_gen; ++i) {
    out[i] = ArgMax(llama_get_logits_ith(ctx, -1), n_vocab);
    if (i + 1 < n_gen && llama_decode(ctx, llama_batch_get_one(&out[i], 1))) {
      free(out);
      return 1;
    }
  }
  PrintIds("tokens:", out, n_gen);
  fputs("text: ", stdout);
  int cap = kPieceBytes;
  char* piece = malloc((size_t)cap);
  for (int i = 0; i < n_gen; ++i) {
    const int n = Piece(vocab, out[i], &piece, &cap);
    PrintEscaped(piece, n > 0 ? (size_t)n : 0);
  }
  putchar('\n');
  free(piece);
  free(out);
  return 0;
}

static int RunGenerate(const char* model_path, const char* prompt, int n_gen, int top_k) {
  const char* cpu_dir = getenv("TG_PEER_CPU_DIR");
  if (!cpu_dir || !*cpu_dir) cpu_dir = TG_PEER_CPU_DIR_DEFAULT;
  ggml_backend_load_all_from_path(cpu_dir);
  if (ggml_backend_reg_count() == 0) {
    fprintf(stderr, "peer_harness: no ggml backend loaded from '%s' (set TG_PEER_CPU_DIR)\n",
            cpu_dir);
    return 1;
  }
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(model_path, mp);
  if (!model) {
    fprintf(stderr, "peer_harness: cannot load %s\n", model_path);
    return 1;
  }
  const struct llama_vocab* vocab = llama_model_get_vocab(model);
  int n_prompt = 0;
  llama_token* toks = Tokenize(vocab, prompt, strlen(prompt), &n_prompt);
  struct llama_context* ctx = toks ? MakeContext(model, n_prompt, n_gen) : NULL;
  int rc = 1;
  if (ctx) {
    PrintIds("prompt_tokens:", toks, n_prompt);
    rc = Generate(ctx, vocab, n_gen, top_k, toks, n_prompt);
    if (rc) fprintf(stderr, "peer_harness: llama_decode failed\n");
    llama_free(ctx);
  } else {
    fprintf(stderr, "peer_harness: cannot tokenize the prompt or create a context\n");
  }
  free(toks);
  llama_model_free(model);
  fflush(stdout);
  return rc;
}

int main(int argc, char** argv) {
  llama_log_set(QuietLog, NULL);
  int rc = 2;
  if (argc == 3 && strcmp(argv[1], "tokenize") == 0) {
    llama_backend_init();
    rc = RunTokenize(argv[2]);
  } else if (argc == 3 && strcmp(argv[1], "pieces") == 0) {
    llama_backend_init();
    rc = RunPieces(argv[2]);
  } else if ((argc == 5 || argc == 6) && strcmp(argv[1], "generate") == 0) {
    llama_backend_init();
    rc = RunGenerate(argv[2], argv[3], atoi(argv[4]), argc == 6 ? atoi(argv[5]) : kDefaultTopK);
  } else {
    fprintf(stderr,
            "usage: %s tokenize MODEL < prompts\n"
            "       %s pieces MODEL\n"
            "       %s generate MODEL PROMPT N [TOPK]\n",
            argv[0], argv[0], argv[0]);
    return rc;
  }
  llama_backend_free();
  return rc;
}
