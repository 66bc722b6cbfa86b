"""A plain Llama-style trainer in PyTorch, the reference side of benchmarks/quality.py (issue 20):
what a person writes in ~100 lines, no code from the engine. Model: token embedding (tied to
the output), per block RMSNorm -> causal attention (SDPA) with RoPE -> residual, RMSNorm ->
SwiGLU -> residual, final RMSNorm; N(0, 0.02) weights. AdamW lr 1e-3 (beta2 0.99, decay 0.1 on
matrices), linear warmup over 100 steps, then cosine to 0.1x over the wall budget; batch 12 of
64 tokens; clip 1.0. Tokens: "char" (the sorted characters of the text, nanoGPT's) or "bpe"
(SentencePiece BPE, 512 pieces, trained on the text, lossless: identity normalization, "\\n" a
piece). Split: the last 10% of the characters are held out (nanoGPT's), encoded on their own;
scored in consecutive windows covering them, in nats per token and bits per UTF-8 byte.

    python benchmarks/llama_script.py --text input.txt --tokens bpe --seconds 60 --threads 2
prints one JSON line: steps, train_s, val_loss, val_bpb, tokens, bytes.
"""
import argparse, json, math, time  # noqa: E401

import torch
import torch.nn.functional as F
from torch import nn

NL = "\u2424"   # stands for "\n" inside SentencePiece, which splits its input at newlines


def tokenizer(text: str, kind: str):
    """(encode: str -> list[int], decode_one: int -> str, vocab_size)."""
    if kind == "char":
        chars = sorted(set(text))
        lut = {c: i for i, c in enumerate(chars)}
        return (lambda s: [lut[c] for c in s]), chars.__getitem__, len(chars)
    import io
    import sentencepiece as spm
    t = text.replace("\n", NL)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([t[i:i + 4000] for i in range(0, len(t), 4000)]),
        model_writer=model, model_type="bpe", vocab_size=512, character_coverage=1.0,
        normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, hard_vocab_limit=False, max_sentence_length=1 << 16,
        minloglevel=2, num_threads=1)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return ((lambda s: sp.encode(s.replace("\n", NL))),
            (lambda i: sp.id_to_piece(i).replace("\u2581", " ").replace(NL, "\n")),
            sp.get_piece_size())


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        hidden = 32 * -(-(8 * C // 3) // 32)
        self.H, self.n1, self.n2 = H, nn.Parameter(torch.ones(C)), nn.Parameter(torch.ones(C))
        self.qkv, self.o = nn.Linear(C, 3 * C, bias=False), nn.Linear(C, C, bias=False)
        self.gu, self.down = nn.Linear(C, 2 * hidden, bias=False), nn.Linear(hidden, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.H, -1).transpose(1, 2)
                   for t in self.qkv(rms(x, self.n1)).split(C, -1))
        rot = lambda t: torch.cat([t[..., ::2] * cos - t[..., 1::2] * sin,  # noqa: E731
                                   t[..., ::2] * sin + t[..., 1::2] * cos], -1)
        y = F.scaled_dot_product_attention(rot(q), rot(k), v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        g, u = self.gu(rms(x, self.n2)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, V, C=128, L=4, H=4, T=64):
        super().__init__()
        self.emb, self.norm = nn.Embedding(V, C), nn.Parameter(torch.ones(C))
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        ang = torch.arange(T)[:, None] * 10000.0 ** (-torch.arange(0, C // H, 2) / (C // H))
        self.cos, self.sin = ang.cos(), ang.sin()          # (T, head_dim / 2)

    def forward(self, idx):
        x, T = self.emb(idx), idx.shape[1]
        for b in self.blocks:
            x = b(x, self.cos[:T], self.sin[:T])
        return rms(x, self.norm) @ self.emb.weight.T


def windows(ids, T):
    """Consecutive (x, y) windows scoring every target of ids[1:] once (the last one ends at the
    end; its targets scored before are -1)."""
    out = [(ids[s:s + T], ids[s + 1:s + T + 1]) for s in range(0, len(ids) - T, T)]
    left = len(ids) - 1 - T * len(out)
    if left:
        out.append((ids[-T - 1:-1], [-1] * (T - left) + ids[-left:]))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--text", required=True)
    p.add_argument("--tokens", choices=("char", "bpe"), default="char")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    text = open(a.text, encoding="utf-8").read()
    encode, piece, V = tokenizer(text, a.tokens)
    cut = int(len(text) * 0.9)
    train, val = torch.tensor(encode(text[:cut])), encode(text[cut:])
    model, T, B, peak, warm = Llama(V), 64, 12, 1e-3, 100
    decay = [p for p in model.parameters() if p.dim() == 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": keep, "weight_decay": 0.0}], lr=peak, betas=(0.9, 0.99))
    step, t0 = 0, time.perf_counter()
    while (frac := (time.perf_counter() - t0) / a.seconds) < 1.0:
        lr = peak * (step + 1) / warm if step < warm else \
            0.1 * peak + 0.45 * peak * (1 + math.cos(math.pi * frac))
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(len(train) - T, (B,))
        x = torch.stack([train[i:i + T] for i in ix])
        y = torch.stack([train[i + 1:i + T + 1] for i in ix])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
    train_s = time.perf_counter() - t0
    xs, ys = (torch.tensor(list(c)) for c in zip(*windows(val, T)))
    with torch.no_grad():
        nats = sum(F.cross_entropy(model(x).flatten(0, 1).double(), y.flatten(),
                                   ignore_index=-1, reduction="sum").item()
                   for x, y in zip(xs.split(64), ys.split(64)))
    n = int((ys >= 0).sum())
    n_bytes = sum(len(piece(i).encode("utf-8")) for i in val[1:])
    print(json.dumps({"steps": step, "train_s": round(train_s, 2), "val_loss": nats / n,
                      "val_bpb": nats / math.log(2) / n_bytes, "tokens": n, "bytes": n_bytes}))


if __name__ == "__main__":
    main()
