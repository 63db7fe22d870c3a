"""Tiny random-weight llama GGUFs written with the `gguf` package, for fast, offline tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "and",
    "ran",
    "to",
    "house",
    "big",
    "small",
    "red",
    "blue",
    "tree",
    "sun",
    "moon",
    "is",
    "was",
    "in",
    "it",
    "of",
    "he",
    "she",
    "we",
]
SPECIALS = ["<unk>", "<s>", "</s>"]


def vocabulary(
    renamed: dict[int, str] | None = None, pad: int = 0
) -> tuple[list[str], list[float], list[int]]:
    tokens = list(SPECIALS)
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581" + w for w in WORDS]
    pieces += ["\u00e9", "\u4e16", "\u2581\u00e9t\u00e9"]  # multi-byte UTF-8 pieces
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    for i, text in (renamed or {}).items():
        tokens[i] = text
    scores = [0.0] * len(SPECIALS) + [0.0] * 256 + [float(-i) for i in range(len(pieces))]
    # Padding rows at the end, as Qwen2.5 and Gemma 3 have: ids the other model of a pair lacks.
    tokens += [f"[PAD{i}]" for i in range(pad)]
    types += [gguf.TokenType.NORMAL] * pad
    scores += [-1000.0] * pad
    return tokens, scores, [int(t) for t in types]


@dataclass(frozen=True)
class TinySpec:
    seed: int = 0
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_ff: int = 128
    n_ctx: int = 2048
    logit_scale: float = 1.0  # std of output weights: large = confident, greedy-stable logits
    perturb_from: int | None = None  # make weights = weights(seed=perturb_from) + noise(seed)
    perturb: float = 0.0
    renamed: tuple[tuple[int, str], ...] = ()
    # Extra tokens after the shared vocabulary, with rows of their own (so, unlike real padding,
    # likely enough to be sampled) and the shared rows unchanged.
    pad: int = 0
    # > 0: the padding rows' logits sit about this far below the shared rows' (every embedding
    # carries a constant channel that their output rows point against), as a real model's bulk of
    # unlikely tokens does; their mass then stays small however many they are.
    pad_below: float = 0.0
    claimed_layers: int | None = None  # a header that says more (or fewer) layers than the tensors hold
    header: tuple[
        tuple[str, object], ...
    ] = ()  # header values written in place of the true ones (crafted files)


def _weights(spec: TinySpec, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    e, f = spec.n_embd, spec.n_ff

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    w = {
        "token_embd.weight": mat(n_vocab, e, 1.0),
        "output_norm.weight": np.ones(e, dtype=np.float32),
        "output.weight": mat(n_vocab, e, spec.logit_scale),
    }
    w["output.weight"][2] = 0.0  # keep EOS unlikely so generations run long
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(e, dtype=np.float32)
        w[p + "ffn_norm.weight"] = np.ones(e, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w[p + name + ".weight"] = mat(e, e, 1.0 / np.sqrt(e))
        w[p + "ffn_gate.weight"] = mat(f, e, 1.0 / np.sqrt(e))
        w[p + "ffn_up.weight"] = mat(f, e, 1.0 / np.sqrt(e))
        w[p + "ffn_down.weight"] = mat(e, f, 1.0 / np.sqrt(f))
    return w


CHANNEL = 8.0  # pad_below's constant embedding channel


def _pad_rows(weights: dict[str, np.ndarray], spec: TinySpec) -> None:
    rng = np.random.default_rng(10_000 + spec.seed)
    for name, scale in (("token_embd.weight", 1.0), ("output.weight", spec.logit_scale)):
        extra = (rng.standard_normal((spec.pad, spec.n_embd)) * scale).astype(np.float32)
        weights[name] = np.concatenate([weights[name], extra])
    if spec.pad_below:
        weights["token_embd.weight"][:, 0] = CHANNEL
        out = weights["output.weight"]
        out[:, 0] = 0.0
        out[-spec.pad :] *= 0.1
        channel_after_norm = CHANNEL * np.sqrt(spec.n_embd / (CHANNEL**2 + spec.n_embd))
        out[-spec.pad :, 0] = -spec.pad_below / channel_after_norm


def add_tokenizer(w: gguf.GGUFWriter, tokens: list[str], scores: list[float], types: list[int]) -> None:
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def tiny_vocabulary(w: gguf.GGUFWriter) -> int:
    """Write the tiny vocabulary's tokenizer keys; return its size."""
    tokens, scores, types = vocabulary()
    add_tokenizer(w, tokens, scores, types)
    return len(tokens)


def write_tiny_llama(path: Path, spec: TinySpec) -> Path:
    tokens, scores, types = vocabulary(dict(spec.renamed), spec.pad)
    n_vocab = len(tokens) - spec.pad
    if spec.perturb_from is None:
        weights = _weights(spec, n_vocab, spec.seed)
    else:
        weights = _weights(spec, n_vocab, spec.perturb_from)
        noise = _weights(spec, n_vocab, spec.seed)
        for name, value in weights.items():
            if not name.endswith("norm.weight"):
                value += spec.perturb * noise[name]
    if spec.pad:
        _pad_rows(weights, spec)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"tiny-{spec.seed}")
    w.add_block_count(spec.claimed_layers or spec.n_layer)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head)
    w.add_rope_dimension_count(spec.n_embd // spec.n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_tokenizer(w, tokens, scores, types)
    for name, value in weights.items():
        w.add_tensor(name, value)
    for key, value in spec.header:
        if key in w.kv_data[0]:
            w.kv_data[0][key].value = value
        else:  # a key the model would not have: an unsigned number, as llama.cpp's hparams are
            w.add_uint32(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
