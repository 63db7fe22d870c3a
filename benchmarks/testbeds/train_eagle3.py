"""Train a one-layer EAGLE-3 head for the testbed's target on this CPU, from eagle3_data's file, and
write it as an `eagle3` GGUF that `localspec run -m TARGET -d HEAD.gguf` drafts with. A
benchmark-only extra: it needs torch (`pip install torch`), which localspec does not.

    python -m benchmarks.testbeds.train_eagle3 testbed/target-f16.gguf --data eagle3-data.npz \\
        --out testbed/eagle3-head.gguf [--eval HELD_OUT.npz] [--epochs 3] [--depth 3] [--lr 1e-3]

The head is llama.cpp's eagle3 graph (src/models/eagle3.cpp) in torch: `fc` projects the target's
three layer inputs at position p - 1, RMS-normed first (`norm_before_fc`: SmolLM2's residual stream
holds values in the tens of thousands), to g; the token at p is embedded with the target's own
embeddings; both are RMS-normed, joined, and fed to one attention layer (NORM rotary positions)
whose residual is g, then a SwiGLU FFN; the target's output projection (SmolLM2 ties it to the
embeddings) turns the pre-norm state into logits for the token at p + 1, learned against the
target's own odds there (its TOP most likely tokens, eagle3_data's file: more to learn from a token
than its greedy choice alone). Training-time test (EAGLE-3's): at depth j > 1 the head is fed
its own pre-norm state of depth j - 1 in place of g, and attends to the exact entries before its
chain, then its chain's own, as it does when it drafts j tokens deep (the losses weighted 0.8^(j-1)).
Logits are computed for the target's replies and a sample of prompt positions only (--prompt-share):
the output projection over 49k ids is what costs. With --draft-vocab N the head has its own
projection over the N ids the target chooses most (EAGLE-3's draft vocabulary, mapped back by a
`d2t` table): cheaper to train and to run, and never right where the target's choice is not among them."""

from __future__ import annotations

import math
import time
from pathlib import Path

import gguf
import numpy as np

from benchmarks.harness import options
from benchmarks.testbeds.target_header import copy_tokenizer, read_target

HEAD_DIM = 64


def _model(torch, fields: dict, n_read: int, table, vocab):  # noqa: ANN001
    """The head; with `vocab` (target ids), an output projection of its own over those ids alone
    (started from their embeddings), else the target's (SmolLM2 ties it to the embeddings)."""
    nn = torch.nn
    arch = fields["general.architecture"]
    n_embd, n_ff = fields[f"{arch}.embedding_length"], fields[f"{arch}.feed_forward_length"]
    n_head, n_kv = fields[f"{arch}.attention.head_count"], fields[f"{arch}.attention.head_count_kv"]
    eps, base = (
        fields[f"{arch}.attention.layer_norm_rms_epsilon"],
        fields.get(f"{arch}.rope.freq_base", 10000.0),
    )

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            linear = lambda i, o: nn.Linear(i, o, bias=False)  # noqa: E731
            self.fc = linear(n_read * n_embd, n_embd)
            self.wq, self.wk, self.wv = (linear(2 * n_embd, h * HEAD_DIM) for h in (n_head, n_kv, n_kv))
            self.wo = linear(n_head * HEAD_DIM, n_embd)
            self.gate, self.up, self.down = linear(n_embd, n_ff), linear(n_embd, n_ff), linear(n_ff, n_embd)
            self.norms = nn.ParameterDict(
                {k: nn.Parameter(torch.ones(n_embd)) for k in ("attn", "hidden", "ffn", "output")}
            )
            self.norms["enc"] = nn.Parameter(torch.ones(n_read * n_embd))
            self.vocab = vocab
            self.out = table if vocab is None else nn.Parameter(table[torch.from_numpy(vocab)].clone())
            index = torch.arange(len(table)) if vocab is None else torch.full((len(table),), -1)
            if vocab is not None:
                index[torch.from_numpy(vocab)] = torch.arange(len(vocab))
            self.index = index

        def log_odds(self, state):  # noqa: ANN001, ANN201  over the head's vocabulary
            return (self.norm(state, "output") @ self.out.T).log_softmax(-1)

        def targets(self, ids, odds):  # noqa: ANN001, ANN201
            """The target's TOP ids as rows of the head's vocabulary (0 where it has none), and
            their odds, renormalised over the ids it has."""
            rows = self.index[ids]
            odds = odds * (rows >= 0)
            return rows.clamp(min=0), odds / odds.sum(-1, keepdim=True).clamp(min=1e-9)

        def encode(self, feats):  # noqa: ANN001, ANN201
            return self.fc(self.norm(feats, "enc"))

        def norm(self, x, name: str):  # noqa: ANN001, ANN201
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.norms[name]

        def rope(self, x, pos):  # noqa: ANN001, ANN201  (T, heads, 64): pairs (2i, 2i+1), llama.cpp's NORM
            inv = base ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
            angle = pos[:, None, None].float() * inv
            x0, x1 = x[..., 0::2], x[..., 1::2]
            out = torch.stack([x0 * angle.cos() - x1 * angle.sin(), x0 * angle.sin() + x1 * angle.cos()], -1)
            return out.flatten(-2)

        def qkv(self, emb, g, pos):  # noqa: ANN001, ANN201
            x = torch.cat([self.norm(emb, "attn"), self.norm(g, "hidden")], -1)
            t = len(x)
            q = self.rope(self.wq(x).view(t, n_head, HEAD_DIM), pos)
            k = self.rope(self.wk(x).view(t, n_kv, HEAD_DIM), pos).repeat_interleave(n_head // n_kv, 1)
            return q, k, self.wv(x).view(t, n_kv, HEAD_DIM).repeat_interleave(n_head // n_kv, 1)

        def rest(self, attn, g):  # noqa: ANN001, ANN201
            h = self.wo(attn.flatten(1)) + g
            x = self.norm(h, "ffn")
            return h + self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))

    return Head()


def _depths(torch, head, emb, g, depth: int):  # noqa: ANN001, ANN201
    """Pre-norm states of entries 1..T-1 at each depth (entry p: the token at p with the row at
    p - 1), training-time test as the module's docstring says."""
    t = len(emb)
    pos = torch.arange(t)
    scale = 1.0 / math.sqrt(HEAD_DIM)
    q1, k1, v1 = head.qkv(emb, g, pos)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    scores = torch.einsum("qhd,khd->hqk", q1, k1) * scale
    out = torch.einsum("hqk,khd->qhd", scores.masked_fill(~causal, -1e30).softmax(-1), v1)
    states = [head.rest(out, g)]
    keys, values = [k1], [v1]
    for j in range(2, depth + 1):
        # depth j at p: the token at p with depth j-1's state at p - 1; exact entries up to p-j+1,
        # then the chain's entries of depths 2..j at p-j+2..p
        prev = torch.cat([torch.zeros_like(states[-1][:1]), states[-1][:-1]])
        q, k, v = head.qkv(emb, prev, pos)
        keys.append(k)
        values.append(v)
        exact = torch.ones(t, t, dtype=torch.bool).tril(-(j - 1))
        s_exact = (torch.einsum("qhd,khd->hqk", q, k1) * scale).masked_fill(~exact, -1e30)
        chain = [
            (torch.roll(keys[i], j - 1 - i, 0), torch.roll(values[i], j - 1 - i, 0)) for i in range(1, j)
        ]
        s_chain = torch.stack([torch.einsum("qhd,qhd->hq", q, ck) * scale for ck, _ in chain], -1)
        weights = torch.cat([s_exact, s_chain], -1).softmax(-1)
        out = torch.einsum("hqk,khd->qhd", weights[..., :t], v1)
        out = out + sum(
            torch.einsum("hq,qhd->qhd", weights[..., t + i], cv) for i, (_, cv) in enumerate(chain)
        )
        states.append(head.rest(out, prev))
    return states


def _write(path: Path, head, fields: dict, types: dict, layers: list[int]) -> None:  # noqa: ANN001
    arch, w = fields["general.architecture"], gguf.GGUFWriter(str(path), "eagle3")
    w.add_name("eagle3-testbed")
    w.add_block_count(1)
    for key in ("context_length", "embedding_length", "feed_forward_length", "rope.dimension_count"):
        w.add_uint32(f"eagle3.{key}", fields[f"{arch}.{key}"])
    w.add_head_count(fields[f"{arch}.attention.head_count"])
    w.add_head_count_kv(fields[f"{arch}.attention.head_count_kv"])
    w.add_rope_freq_base(fields.get(f"{arch}.rope.freq_base", 10000.0))
    w.add_layer_norm_rms_eps(fields[f"{arch}.attention.layer_norm_rms_epsilon"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_array("eagle3.target_layers", layers)
    w.add_uint32("eagle3.target_hidden_size", fields[f"{arch}.embedding_length"])
    w.add_bool("eagle3.norm_before_fc", True)
    copy_tokenizer(w, fields, types)
    t = lambda x: x.detach().numpy().astype(np.float32)  # noqa: E731
    if head.vocab is not None:  # its own projection; llama.cpp maps its rows to target ids by d2t
        w.add_tensor("output.weight", t(head.out))
        w.add_tensor("d2t", head.vocab.astype(np.int64), raw_dtype=gguf.GGMLQuantizationType.I64)
    tensors = {
        "fc.weight": head.fc.weight,
        "enc.output_norm.weight": head.norms["enc"],
        "output_norm.weight": head.norms["output"],
        "blk.0.attn_norm.weight": head.norms["attn"],
        "blk.0.attn_norm_2.weight": head.norms["hidden"],
        "blk.0.ffn_norm.weight": head.norms["ffn"],
        "blk.0.attn_q.weight": head.wq.weight,
        "blk.0.attn_k.weight": head.wk.weight,
        "blk.0.attn_v.weight": head.wv.weight,
        "blk.0.attn_output.weight": head.wo.weight,
        "blk.0.ffn_gate.weight": head.gate.weight,
        "blk.0.ffn_up.weight": head.up.weight,
        "blk.0.ffn_down.weight": head.down.weight,
    }
    for name, value in tensors.items():
        w.add_tensor(name, t(value))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _sequences(data, torch, table, head, rng):  # noqa: ANN001, ANN201
    """Each sequence's entries 1..T-1 (the token at p with g at p - 1), what each learns (the
    target's odds over its TOP tokens after p) and which are replies (where the head drafts)."""
    starts, prompt_ends = data["starts"], data["prompt_ends"]
    order = range(len(starts) - 1) if rng is None else rng.permutation(len(starts) - 1)
    for i in order:
        lo, hi = int(starts[i]), int(starts[i + 1])
        tokens = torch.from_numpy(data["tokens"][lo:hi].astype(np.int64))
        feats = torch.from_numpy(data["features"][lo:hi].astype(np.float32))
        ids = torch.from_numpy(data["top_ids"][lo + 1 : hi].astype(np.int64))
        odds = torch.from_numpy(data["top_logits"][lo + 1 : hi].astype(np.float32)).softmax(-1)
        reply = np.arange(1, hi - lo) >= int(prompt_ends[i]) - lo - 1
        yield table[tokens[1:]], head.encode(feats[:-1]), ids, odds, reply


def _loss(torch, head, states, ids, odds, keep, seen):  # noqa: ANN001, ANN201
    """Cross-entropy against the target's odds over its TOP tokens, each depth weighted 0.8^(j-1);
    tallies top-1 agreement with the target's greedy token in `seen`."""
    loss, (mapped, odds) = torch.zeros(()), head.targets(ids, odds)
    greedy = head.index[ids[:, 0]]  # -1 (never agreed with) where the head's vocabulary lacks it
    for j, state in enumerate(states):
        rows = torch.from_numpy(np.nonzero(keep[j:])[0] + j)
        logp = head.log_odds(state[rows])
        loss = loss - 0.8**j * (odds[rows] * logp.gather(1, mapped[rows])).sum(-1).mean()
        seen[j] += ((logp.argmax(-1) == greedy[rows]).sum().item(), len(rows))
    return loss


def _evaluate(torch, head, table, data, depth: int) -> str:  # noqa: ANN001
    """Top-1 agreement with the target's greedy token at the replies' positions of held-out data."""
    seen = np.zeros((depth, 2))
    with torch.no_grad():
        for emb, g, ids, odds, reply in _sequences(data, torch, table, head, None):
            _loss(torch, head, _depths(torch, head, emb, g, depth), ids, odds, reply, seen)
    return _rates(seen)


def _rates(seen: np.ndarray) -> str:
    return ", ".join(f"depth {j + 1} {s[0] / max(s[1], 1):.2f}" for j, s in enumerate(seen))


def _draft_vocab(data, n: int) -> np.ndarray | None:  # noqa: ANN001
    """The n ids the target ranks first most often in the data, then by how often they are in its TOP."""
    if n <= 0:
        return None
    size = max(n, int(data["top_ids"].max()) + 1)
    first = np.bincount(data["top_ids"][:, 0], minlength=size)
    anywhere = np.bincount(data["top_ids"].ravel(), minlength=size)
    ranked = np.lexsort((-anywhere, -first))[:n]
    covered = np.isin(data["top_ids"][:, 0], ranked).mean()
    print(f"draft vocabulary: {n} ids, the target's first choice at {covered:.1%} of the data's positions")
    return np.sort(ranked).astype(np.int64)


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    ap.add_argument("--data", type=Path, required=True, help="eagle3_data's .npz")
    ap.add_argument("--eval", type=Path, help="eagle3_data's .npz of held-out prompts, scored each epoch")
    ap.add_argument("--out", type=Path, required=True, help="the eagle3 GGUF to write")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--depth", type=int, default=3, help="training-time test depth")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument(
        "--prompt-share", type=float, default=0.25, help="of prompt positions, the share learned from"
    )
    ap.add_argument(
        "--draft-vocab",
        type=int,
        default=0,
        help="the head's own output over the N ids the target chooses most in the data (0: the target's)",
    )
    a = options.parse(ap)
    import torch  # a benchmark-only extra: only this script needs it

    torch.manual_seed(0)
    data = np.load(a.data)
    held_out = np.load(a.eval) if a.eval else None
    fields, types, embd = read_target(a.target, embeddings=True)
    layers = [int(x) for x in data["layers"]]
    table = torch.from_numpy(embd)
    head = _model(torch, fields, len(layers), table, _draft_vocab(data, a.draft_vocab))
    steps = a.epochs * (len(data["starts"]) - 1)
    opt = torch.optim.AdamW(head.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=steps, pct_start=0.05)
    rng, started = np.random.default_rng(0), time.perf_counter()
    for epoch in range(a.epochs):
        seen = np.zeros((a.depth, 2))
        for emb, g, ids, odds, reply in _sequences(data, torch, table, head, rng):
            keep = reply | (rng.random(len(reply)) < a.prompt_share)
            loss = _loss(torch, head, _depths(torch, head, emb, g, a.depth), ids, odds, keep, seen)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        rates = _rates(seen)
        scored = (
            f"; held out: {_evaluate(torch, head, table, held_out, a.depth)}" if held_out is not None else ""
        )
        print(
            f"epoch {epoch + 1}: top-1 agreement {rates}{scored} ({time.perf_counter() - started:.0f} s)",
            flush=True,  # an epoch takes minutes: its line is seen as it ends, in a log too
        )
    _write(a.out, head, fields, types, layers)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
