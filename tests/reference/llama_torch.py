#!/usr/bin/python3
"""Independent PyTorch float32 reference for llama-family GGUF models.

Written from the model definitions (not from tensorgrid's code) so tensorgrid's
`tg-run` can be checked against it; see compare_tg_run.py and README.md.

    /usr/bin/python3 llama_torch.py MODEL.gguf --tokens 1,403,407,261,378 [--n-gen 64] [--top 5]

prints ONE JSON object on stdout:
    {"prompt_tokens": [...],
     "top_logits": [[id, logit], ...],   # top K of the LAST prompt position
     "tokens": [...],                    # greedy (argmax) continuation, n-gen tokens
     ...optional fields below...}

Optional:
    --logits-for ID,ID,..   adds "logits_for": [[id, logit], ...] at the last prompt position
    --force-tokens ID,..    adds "forced": one entry per forced token t_i, scored
                            teacher-forced on prompt + t_0..t_{i-1}:
                            {"pos": i, "token": t_i, "logit": logit(t_i),
                             "argmax": id, "max_logit": l, "second": [id, l]}
    --decode                adds "text": the greedy tokens decoded with the GGUF vocab
    --kv-f16                diagnostic: emulate llama.cpp's default F16 KV cache (K, V, and
                            the q / softmax operands of the two attention products rounded
                            to f16); use only to explain differences from a stock llama.cpp

Supported architectures (general.architecture): llama, mistral (rope "normal":
pairs (2i, 2i+1)), qwen2 (q/k/v biases, rope "neox": pairs (i, i + n_rot/2)),
qwen3 (per-head RMSNorm of q and k before rope, neox rope), and mixtures of
experts: qwen3moe (qwen3's attention) and llama/mistral with expert_count > 0
(mixtral): a softmax router, the expert_used_count most probable experts per
token, their probabilities renormalised to sum 1 (times expert_weights_scale
when set), each chosen expert a SwiGLU FFN (HF's Qwen3MoeSparseMoeBlock /
MixtralSparseMoeBlock).  Any weight type
gguf_reader.py can dequantize is accepted; everything is computed in float32.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gguf_reader import GGUFReader  # noqa: E402

ROPE_NORMAL, ROPE_NEOX = "normal", "neox"
ARCHS = {
    # arch: (rope mode, has q/k norm)
    "llama": (ROPE_NORMAL, False),
    "mistral": (ROPE_NORMAL, False),
    "qwen2": (ROPE_NEOX, False),
    "qwen3": (ROPE_NEOX, True),
    "qwen3moe": (ROPE_NEOX, True),
}


class ModelError(Exception):
    pass


class Hparams:
    def __init__(self, r: GGUFReader):
        md = r.metadata
        self.arch = md.get("general.architecture")
        if self.arch not in ARCHS:
            raise ModelError("unsupported general.architecture %r (supported: %s)"
                             % (self.arch, ", ".join(ARCHS)))
        a = self.arch

        def req(key):
            k = "%s.%s" % (a, key)
            if k not in md:
                raise ModelError("missing metadata key %s" % k)
            return md[k]

        def opt(key, default):
            return md.get("%s.%s" % (a, key), default)

        self.rope_mode, self.qk_norm = ARCHS[a]
        self.n_expert = int(opt("expert_count", 0))
        if a == "qwen3moe" and self.n_expert <= 0:
            raise ModelError("qwen3moe needs %s.expert_count > 0" % a)
        self.n_expert_used = int(opt("expert_used_count", 0))
        if self.n_expert and not 0 < self.n_expert_used <= self.n_expert:
            raise ModelError("expert_used_count %d of %d experts" % (self.n_expert_used, self.n_expert))
        scale = float(opt("expert_weights_scale", 0.0))
        self.expert_weights_scale = 1.0 if scale == 0.0 else scale
        self.n_embd = int(req("embedding_length"))
        self.n_ff = int(req("feed_forward_length"))
        self.n_ff_exp = self.n_ff
        if a == "qwen3moe":
            self.n_ff_exp = int(opt("expert_feed_forward_length", self.n_ff // self.n_expert_used))
        self.n_layer = int(req("block_count"))
        self.n_head = int(req("attention.head_count"))
        self.n_head_kv = int(opt("attention.head_count_kv", self.n_head))
        self.eps = float(req("attention.layer_norm_rms_epsilon"))
        if self.n_head <= 0 or self.n_head_kv <= 0 or self.n_head % self.n_head_kv:
            raise ModelError("n_head %d not a multiple of n_head_kv %d" % (self.n_head, self.n_head_kv))
        if "%s.attention.key_length" % a in md:
            self.head_dim = int(md["%s.attention.key_length" % a])
        else:
            if self.n_embd % self.n_head:
                raise ModelError("n_embd %d not divisible by n_head %d" % (self.n_embd, self.n_head))
            self.head_dim = self.n_embd // self.n_head
        self.head_dim_v = int(opt("attention.value_length", self.head_dim))
        self.rope_base = float(opt("rope.freq_base", 10000.0))
        self.n_rot = int(opt("rope.dimension_count", self.head_dim))
        if self.n_rot % 2 or self.n_rot > self.head_dim:
            raise ModelError("rope.dimension_count %d invalid for head_dim %d" % (self.n_rot, self.head_dim))
        scaling = opt("rope.scaling.type", None)
        factor = opt("rope.scaling.factor", None)
        legacy = opt("rope.scale_linear", None)  # older GGUF key
        self.freq_scale = 1.0
        if scaling in (None, "none"):
            if scaling is None and legacy is not None and float(legacy) not in (0.0, 1.0):
                self.freq_scale = 1.0 / float(legacy)
        elif scaling == "linear":
            if factor is not None and float(factor) not in (0.0, 1.0):
                self.freq_scale = 1.0 / float(factor)
        else:
            raise ModelError("rope scaling type %r not supported (only linear / none)" % scaling)

    def as_dict(self):
        return dict(self.__dict__)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


class LlamaTorch:
    def __init__(self, path: str, kv_f16: bool = False):
        self.kv_f16 = kv_f16
        self.reader = GGUFReader(path)
        self.hp = Hparams(self.reader)
        hp = self.hp
        r = self.reader

        def W(name, shape=None, required=True):
            if name not in r.tensors:
                if required:
                    raise ModelError("missing tensor %s" % name)
                return None
            a = r.load(name)
            if shape is not None and tuple(a.shape) != tuple(shape):
                raise ModelError("tensor %s: numpy shape %s, expected %s" % (name, a.shape, shape))
            return torch.from_numpy(a)

        E, D, Dv = hp.n_embd, hp.head_dim, hp.head_dim_v
        self.tok_embd = W("token_embd.weight")
        if self.tok_embd.dim() != 2 or self.tok_embd.shape[1] != E:
            raise ModelError("token_embd.weight shape %s" % (tuple(self.tok_embd.shape),))
        self.n_vocab = self.tok_embd.shape[0]
        self.layers = []
        for i in range(hp.n_layer):
            p = "blk.%d." % i
            L = {
                "attn_norm": W(p + "attn_norm.weight", (E,)),
                "wq": W(p + "attn_q.weight", (hp.n_head * D, E)),
                "wk": W(p + "attn_k.weight", (hp.n_head_kv * D, E)),
                "wv": W(p + "attn_v.weight", (hp.n_head_kv * Dv, E)),
                "wo": W(p + "attn_output.weight", (E, hp.n_head * Dv)),
                "bq": W(p + "attn_q.bias", (hp.n_head * D,), required=False),
                "bk": W(p + "attn_k.bias", (hp.n_head_kv * D,), required=False),
                "bv": W(p + "attn_v.bias", (hp.n_head_kv * Dv,), required=False),
                "bo": W(p + "attn_output.bias", (E,), required=False),
                "ffn_norm": W(p + "ffn_norm.weight", (E,)),
            }
            if hp.n_expert:
                X, F = hp.n_expert, hp.n_ff_exp
                L["router"] = W(p + "ffn_gate_inp.weight", (X, E))
                L["gate_exps"] = W(p + "ffn_gate_exps.weight", (X, F, E))
                L["up_exps"] = W(p + "ffn_up_exps.weight", (X, F, E))
                L["down_exps"] = W(p + "ffn_down_exps.weight", (X, E, F))
            else:
                L["w_gate"] = W(p + "ffn_gate.weight", (hp.n_ff, E))
                L["w_up"] = W(p + "ffn_up.weight", (hp.n_ff, E))
                L["w_down"] = W(p + "ffn_down.weight", (E, hp.n_ff))
            if hp.qk_norm:
                L["q_norm"] = W(p + "attn_q_norm.weight", (D,))
                L["k_norm"] = W(p + "attn_k_norm.weight", (D,))
            self.layers.append(L)
        self.out_norm = W("output_norm.weight", (E,))
        out = W("output.weight", required=False)
        self.tied = out is None
        self.out = self.tok_embd if out is None else out
        if tuple(self.out.shape) != (self.n_vocab, E):
            raise ModelError("output.weight shape %s" % (tuple(self.out.shape),))
        # Llama-3.x style per-dimension rope frequency factors (optional).
        self.rope_freqs = W("rope_freqs.weight", (hp.n_rot // 2,), required=False)
        inv = hp.rope_base ** (-np.arange(0, hp.n_rot, 2, dtype=np.float64) / hp.n_rot)
        if self.rope_freqs is not None:
            inv = inv / self.rope_freqs.numpy().astype(np.float64)
        self.inv_freq = inv  # float64, (n_rot/2,)

    # -- building blocks --
    def _rope(self, x: torch.Tensor, pos: np.ndarray) -> torch.Tensor:
        """x: (T, H, D) float32; pos: (T,) absolute positions."""
        hp = self.hp
        n = hp.n_rot
        ang = (pos.astype(np.float64) * hp.freq_scale)[:, None] * self.inv_freq[None, :]  # (T, n/2)
        cos = torch.from_numpy(np.cos(ang).astype(np.float32))[:, None, :]
        sin = torch.from_numpy(np.sin(ang).astype(np.float32))[:, None, :]
        out = x.clone()
        if hp.rope_mode == ROPE_NORMAL:
            x0, x1 = x[..., 0:n:2], x[..., 1:n:2]
            out[..., 0:n:2] = x0 * cos - x1 * sin
            out[..., 1:n:2] = x0 * sin + x1 * cos
        else:
            h = n // 2
            x0, x1 = x[..., 0:h], x[..., h:n]
            out[..., 0:h] = x0 * cos - x1 * sin
            out[..., h:n] = x0 * sin + x1 * cos
        return out

    def new_cache(self):
        return {"n": 0, "k": [None] * self.hp.n_layer, "v": [None] * self.hp.n_layer}

    @torch.no_grad()
    def forward(self, tokens, cache) -> torch.Tensor:
        """Feeds `tokens` after the cache's contents; returns (T, n_vocab) logits."""
        hp = self.hp
        T = len(tokens)
        for t in tokens:
            if not 0 <= t < self.n_vocab:
                raise ModelError("token id %d out of range [0, %d)" % (t, self.n_vocab))
        p0 = cache["n"]
        pos = np.arange(p0, p0 + T)
        x = self.tok_embd[torch.tensor(tokens, dtype=torch.long)]  # (T, E)
        H, Hkv, D, Dv = hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v
        rep = H // Hkv
        scale = 1.0 / math.sqrt(D)
        n_kv = p0 + T
        # causal mask: query at p0+i sees keys 0..p0+i
        mask = torch.zeros((T, n_kv), dtype=torch.float32)
        qpos = torch.arange(p0, p0 + T)[:, None]
        kpos = torch.arange(n_kv)[None, :]
        mask[kpos > qpos] = float("-inf")
        for il, L in enumerate(self.layers):
            h = rms_norm(x, L["attn_norm"], hp.eps)
            q = h @ L["wq"].T
            k = h @ L["wk"].T
            v = h @ L["wv"].T
            if L["bq"] is not None:
                q = q + L["bq"]
            if L["bk"] is not None:
                k = k + L["bk"]
            if L["bv"] is not None:
                v = v + L["bv"]
            q = q.view(T, H, D)
            k = k.view(T, Hkv, D)
            v = v.view(T, Hkv, Dv)
            if hp.qk_norm:
                q = rms_norm(q, L["q_norm"], hp.eps)
                k = rms_norm(k, L["k_norm"], hp.eps)
            q = self._rope(q, pos)
            k = self._rope(k, pos)
            if cache["k"][il] is not None:
                k = torch.cat([cache["k"][il], k], dim=0)
                v = torch.cat([cache["v"][il], v], dim=0)
            if self.kv_f16:  # emulate llama.cpp's default F16 KV cache (diagnostic only)
                k = k.to(torch.float16).to(torch.float32)
                v = v.to(torch.float16).to(torch.float32)
            cache["k"][il], cache["v"][il] = k, v
            # (H, T, D) x (H, D, n_kv); query head h uses kv head h // rep
            kh = k.permute(1, 0, 2).repeat_interleave(rep, dim=0)   # (H, n_kv, D)
            vh = v.permute(1, 0, 2).repeat_interleave(rep, dim=0)   # (H, n_kv, Dv)
            qh = q.permute(1, 0, 2)                                  # (H, T, D)
            if self.kv_f16:  # ggml converts the f32 operand to f16 for f16 x f32 mul_mat
                qh = qh.to(torch.float16).to(torch.float32)
            s = torch.matmul(qh, kh.transpose(1, 2)) * scale + mask  # (H, T, n_kv)
            a = torch.softmax(s, dim=-1, dtype=torch.float32)
            if self.kv_f16:
                a = a.to(torch.float16).to(torch.float32)
            o = torch.matmul(a, vh)                                  # (H, T, Dv)
            o = o.permute(1, 0, 2).reshape(T, H * Dv)
            o = o @ L["wo"].T
            if L["bo"] is not None:
                o = o + L["bo"]
            x = x + o
            h = rms_norm(x, L["ffn_norm"], hp.eps)
            x = x + (self._moe(L, h) if hp.n_expert else self._ffn(L["w_gate"], L["w_up"], L["w_down"], h))
        cache["n"] = n_kv
        x = rms_norm(x, self.out_norm, hp.eps)
        return x @ self.out.T

    @staticmethod
    def _ffn(w_gate, w_up, w_down, h):
        return (torch.nn.functional.silu(h @ w_gate.T) * (h @ w_up.T)) @ w_down.T

    def _moe(self, L, h):
        """Sparse MoE block: per token the top-k experts of softmax(router), weights renormalised."""
        hp = self.hp
        probs = torch.softmax(h @ L["router"].T, dim=-1)              # (T, X)
        w, ids = torch.topk(probs, hp.n_expert_used, dim=-1)         # (T, K)
        w = w / w.sum(dim=-1, keepdim=True) * hp.expert_weights_scale
        out = torch.zeros_like(h)
        for e in torch.unique(ids).tolist():
            tok, slot = torch.nonzero(ids == e, as_tuple=True)
            y = self._ffn(L["gate_exps"][e], L["up_exps"][e], L["down_exps"][e], h[tok])
            out.index_add_(0, tok, y * w[tok, slot].unsqueeze(-1))
        return out

    def greedy(self, prompt, n_gen):
        """Returns (logits at the last prompt position (numpy), greedy tokens)."""
        cache = self.new_cache()
        logits = self.forward(list(prompt), cache)[-1]
        first = logits.numpy().copy()
        out = []
        for _ in range(n_gen):
            t = int(torch.argmax(logits).item())
            out.append(t)
            if len(out) == n_gen:
                break
            logits = self.forward([t], cache)[-1]
        return first, out

    def score_forced(self, prompt, forced):
        """Teacher-forced logits: row i predicts forced[i] given prompt + forced[:i]."""
        if not forced:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        cache = self.new_cache()
        seq = list(prompt) + list(forced[:-1])
        logits = self.forward(seq, cache)
        return logits[len(prompt) - 1:].numpy()

    # -- vocab --
    def decode(self, tokens) -> str:
        md = self.reader.metadata
        pieces = md.get("tokenizer.ggml.tokens")
        if not pieces:
            return ""
        types = md.get("tokenizer.ggml.token_type") or [1] * len(pieces)
        model = md.get("tokenizer.ggml.model", "llama")
        out = bytearray()
        if model == "gpt2":
            dec = _gpt2_byte_decoder()
            for t in tokens:
                if types[t] == 3:
                    continue
                for ch in pieces[t]:
                    if ch in dec:
                        out.append(dec[ch])
                    else:
                        out += ch.encode("utf-8")
        else:
            for t in tokens:
                p, ty = pieces[t], types[t]
                if ty == 3:  # control
                    continue
                if ty == 6 and p.startswith("<0x") and p.endswith(">"):
                    out.append(int(p[3:-1], 16))
                else:
                    out += p.replace("\u2581", " ").encode("utf-8")
        return out.decode("utf-8", errors="replace")


def _gpt2_byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) \
        + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _ids(s):
    s = (s or "").strip()
    if not s:
        return []
    return [int(x) for x in s.replace(" ", ",").split(",") if x != ""]


def _topk(logits: np.ndarray, k: int):
    k = min(k, logits.shape[0])
    # stable ordering: by logit descending, then id ascending
    idx = np.lexsort((np.arange(logits.shape[0]), -logits.astype(np.float64)))[:k]
    return [[int(i), float(logits[i])] for i in idx]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="prompt token ids, comma separated")
    ap.add_argument("--n-gen", type=int, default=64)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--logits-for", default="", help="ids whose last-prompt-position logits to report")
    ap.add_argument("--force-tokens", default="", help="continuation to score teacher-forced")
    ap.add_argument("--decode", action="store_true", help="add the decoded greedy text")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-f16", action="store_true",
                    help="diagnostic: round cached K/V to f16 like llama.cpp's default KV cache")
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    torch.set_default_dtype(torch.float32)
    prompt = _ids(a.tokens)
    if not prompt:
        print("llama_torch: empty prompt", file=sys.stderr)
        return 2
    try:
        m = LlamaTorch(a.model, kv_f16=a.kv_f16)
        first, toks = m.greedy(prompt, max(0, a.n_gen))
        res = {"prompt_tokens": prompt, "top_logits": _topk(first, a.top), "tokens": toks}
        ids = _ids(a.logits_for)
        if ids:
            for i in ids:
                if not 0 <= i < m.n_vocab:
                    raise ModelError("--logits-for id %d out of range" % i)
            res["logits_for"] = [[i, float(first[i])] for i in ids]
        forced = _ids(a.force_tokens)
        if forced:
            F = m.score_forced(prompt, forced)
            rows = []
            for i, t in enumerate(forced):
                if not 0 <= t < m.n_vocab:
                    raise ModelError("--force-tokens id %d out of range" % t)
                top2 = _topk(F[i], 2)
                rows.append({"pos": i, "token": t, "logit": float(F[i][t]),
                             "argmax": top2[0][0], "max_logit": top2[0][1],
                             "second": top2[1] if len(top2) > 1 else top2[0]})
            res["forced"] = rows
        if a.decode:
            res["text"] = m.decode(toks)
        res["info"] = {"arch": m.hp.arch, "n_vocab": m.n_vocab, "tied_output": m.tied,
                       "eos_token_id": m.reader.metadata.get("tokenizer.ggml.eos_token_id"),
                       "rope_mode": m.hp.rope_mode, "head_dim": m.hp.head_dim,
                       "n_rot": m.hp.n_rot, "freq_scale": m.hp.freq_scale}
    except (ModelError, OSError, ValueError) as e:
        print("llama_torch: error: %s" % e, file=sys.stderr)
        return 1
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
