"""Tiny drafters made for one target, written with `gguf` for the tiny llama target
(tiny_models.py): an EAGLE-3 head and a DFlash block drafter llama.cpp runs, and the headers of
DSpark and DFlash2 block drafters (localspec refuses those before loading any weights, so their
tensors only need to be named); a tiny Gemma 4 target and an assistant for it, both runnable."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from tiny_models import add_tokenizer, vocabulary

from benchmarks.testbeds.eagle3_model import add_header, finish


def _header(w: gguf.GGUFWriter, n_embd: int, n_head: int, n_ff: int) -> None:
    add_header(w, 1, n_embd, n_head, n_ff, 2048, 1e-5, False)


def write_eagle3(
    path: Path,
    layers: tuple[int, ...] = (0, 1, 1),
    target_hidden: int = 64,
    seed: int = 5,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    pad: int = 0,
    d2t: tuple[int, ...] = (),
) -> Path:
    """A random one-layer EAGLE-3 head reading `layers` of a target of hidden size `target_hidden`,
    borrowing its token embeddings and output projection (as heads for Llama 3.1 8B do), or (`d2t`)
    with an output projection of its own over a reduced vocabulary: its rows are the target ids
    `d2t` lists."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "eagle3")
    w.add_name("tiny-eagle3")
    _header(w, n_embd, n_head, n_ff)
    w.add_array("eagle3.target_layers", list(layers))
    w.add_uint32("eagle3.target_hidden_size", target_hidden)
    add_tokenizer(w, *vocabulary(pad=pad))

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    w.add_tensor("fc.weight", mat(n_embd, len(layers) * target_hidden))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    if d2t:
        w.add_tensor("output.weight", mat(len(d2t), n_embd) * 3.0)
        w.add_tensor("d2t", np.asarray(d2t, dtype=np.int64))
    for name in ("attn_norm", "attn_norm_2", "ffn_norm"):
        w.add_tensor(f"blk.0.{name}.weight", np.ones(n_embd, np.float32))
    for name in ("attn_q", "attn_k", "attn_v"):
        w.add_tensor(f"blk.0.{name}.weight", mat(n_embd, 2 * n_embd))
    w.add_tensor("blk.0.attn_output.weight", mat(n_embd, n_embd))
    w.add_tensor("blk.0.ffn_gate.weight", mat(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_up.weight", mat(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_down.weight", mat(n_embd, n_ff))
    finish(w, {})
    return path


def write_dflash(
    path: Path,
    layers: tuple[int, ...] = (0, 1),
    n_embd: int = 64,
    markov: bool = False,
    selector: bool = False,
    block: int | None = 8,
    mask: int | None = 4,
    seed: int = 7,
    pad: int = 0,
    rows: np.ndarray | None = None,
) -> Path:
    """A random one-layer DFlash block drafter reading `layers` of a target of hidden size `n_embd`,
    with blocks of `block` tokens (None: the file does not say) made of the mask token `mask`
    (None: the file names none), borrowing the target's token embeddings and output projection.
    `markov` makes it DSpark (a random Markov head, its anchor-first layout by default); `selector`
    adds the tensor that tells DFlash2 apart, nothing more. With
    `rows` (logits over the vocabulary) it has token embeddings and an output projection of its own
    and drafts every mask row from exactly those logits, whatever the context (its attention and
    FFN add nothing): a drafter as sure, and as right, as the logits written."""
    rng = np.random.default_rng(seed)
    n_head, n_ff, head = 4, 128, n_embd // 4
    w = gguf.GGUFWriter(str(path), "dflash")
    w.add_name("tiny-dflash")
    _header(w, n_embd, n_head, n_ff)
    w.add_array("dflash.target_layers", list(layers))
    if block is not None:
        w.add_uint32("dflash.block_size", block)
    add_tokenizer(w, *vocabulary(pad=pad))
    if mask is not None:
        w.add_mask_token_id(mask)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    w.add_tensor("fc.weight", mat(n_embd, len(layers) * n_embd))
    for name in ("enc.output_norm", "output_norm", "blk.0.attn_norm", "blk.0.ffn_norm"):
        w.add_tensor(f"{name}.weight", np.ones(n_embd, np.float32))
    for name in ("attn_q_norm", "attn_k_norm"):
        w.add_tensor(f"blk.0.{name}.weight", np.ones(head, np.float32))
    for name in ("attn_q", "attn_k", "attn_v"):
        w.add_tensor(f"blk.0.{name}.weight", mat(n_embd, n_embd))
    w.add_tensor("blk.0.ffn_gate.weight", mat(n_ff, n_embd))
    w.add_tensor("blk.0.ffn_up.weight", mat(n_ff, n_embd))
    silent = 0.0 if rows is not None else 1.0
    w.add_tensor("blk.0.attn_output.weight", mat(n_embd, n_embd) * silent)
    w.add_tensor("blk.0.ffn_down.weight", mat(n_embd, n_ff) * silent)
    if rows is not None and mask is not None:
        # The mask's embedding is the first axis; normalised it is sqrt(n_embd) there, which the
        # output projection's first column turns into `rows`.
        embd = mat(len(rows), n_embd)
        embd[mask] = np.eye(n_embd, dtype=np.float32)[0]
        output = np.zeros((len(rows), n_embd), np.float32)
        output[:, 0] = rows / np.sqrt(n_embd)
        w.add_tensor("token_embd.weight", embd)
        w.add_tensor("output.weight", output)
    if markov:
        n_vocab = len(vocabulary(pad=pad)[0])
        w.add_tensor("markov_w1.weight", mat(n_vocab, 8))
        w.add_tensor("markov_w2.weight", mat(n_vocab, 8) * 8.0)
    if selector:
        w.add_tensor("selector_hidden.weight", np.zeros((8, n_embd), np.float32))
    finish(w, {})
    return path


# The tiny Gemma 4: its layers alternate sliding-window and full attention, ending in a full one
# (its assistant reads the last of each); four heads of 16, as many KV heads.
GEMMA4_PATTERN = [True, False, True, False]
GEMMA4_HEAD = 16


def _gemma4_header(w: gguf.GGUFWriter, arch: str, n_embd: int, pattern: list[bool], head: int) -> None:
    w.add_block_count(len(pattern))
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for key in ("key_length_swa", "value_length_swa"):
        w.add_uint32(f"{arch}.attention.{key}", head)
    w.add_uint32(f"{arch}.attention.sliding_window", 64)
    w.add_array(f"{arch}.attention.sliding_window_pattern", pattern)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)


def _gemma4_layer(mat, i: int, n_embd: int, kv: bool) -> dict[str, np.ndarray]:
    ones = np.ones(n_embd, np.float32)
    layer = {
        "attn_norm": ones, "post_attention_norm": ones, "ffn_norm": ones, "post_ffw_norm": ones,
        "attn_q": mat(4 * GEMMA4_HEAD, n_embd), "attn_output": mat(n_embd, 4 * GEMMA4_HEAD),
        "attn_q_norm": np.ones(GEMMA4_HEAD, np.float32),
        "ffn_gate": mat(128, n_embd), "ffn_up": mat(128, n_embd), "ffn_down": mat(n_embd, 128),
    }  # fmt: skip
    if kv:
        layer.update(
            attn_k=mat(4 * GEMMA4_HEAD, n_embd),
            attn_v=mat(4 * GEMMA4_HEAD, n_embd),
            attn_k_norm=np.ones(GEMMA4_HEAD, np.float32),
        )
    else:
        layer["layer_output_scale"] = np.ones(1, np.float32)
    return {f"blk.{i}.{name}.weight": value for name, value in layer.items()}


def write_gemma4(path: Path, seed: int = 11, output: np.ndarray | None = None) -> Path:
    """A random tiny Gemma 4 target (no per-layer embeddings, no experts). With `output` (its output
    projection, zero past its first 32 columns) a bigram model: its token embeddings are zero past
    their first 32 values too, and its layers add nothing, so its logits at a position are
    `output` over the normalised embedding of the token there."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_name("tiny-gemma4")
    _gemma4_header(w, "gemma4", 64, GEMMA4_PATTERN, GEMMA4_HEAD)
    w.add_uint32("gemma4.embedding_length_per_layer_input", 0)
    tokens, scores, types = vocabulary()
    add_tokenizer(w, tokens, scores, types)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    tensors = {"token_embd.weight": mat(len(tokens), 64), "output_norm.weight": np.ones(64, np.float32)}
    tensors["rope_freqs.weight"] = np.ones(GEMMA4_HEAD // 2, np.float32)
    for i in range(len(GEMMA4_PATTERN)):
        tensors.update(_gemma4_layer(mat, i, 64, kv=True))
    if output is not None:
        tensors["output.weight"] = output
        tensors["token_embd.weight"][:, 32:] = 0
        for i in range(len(GEMMA4_PATTERN)):
            tensors[f"blk.{i}.attn_output.weight"] *= 0
            tensors[f"blk.{i}.ffn_down.weight"] *= 0
    finish(w, tensors)
    return path


def write_assistant(
    path: Path,
    target_hidden: int = 64,
    n_embd: int = 32,
    head: int = GEMMA4_HEAD,
    seed: int = 12,
    output: np.ndarray | None = None,
) -> Path:
    """A random Gemma 4 assistant for a Gemma 4 target of hidden size `target_hidden` (its
    embedding_length_out) whose attention heads are `head` wide: two layers, reading the tiny
    Gemma 4's last sliding-window layer and its last full one. With `output` (the output projection
    of write_gemma4's bigram target) it passes the first n_embd values of its token's embedding
    through (its attention and FFN add nothing) to that projection's columns: each drafted token's
    distribution is the bigram target's after the token before it, flattened (its norm is taken
    over n_embd values, the target's over 64)."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "gemma4-assistant")
    w.add_name("tiny-gemma4-assistant")
    _gemma4_header(w, "gemma4-assistant", n_embd, [True, False], head)
    w.add_uint32("gemma4-assistant.embedding_length_out", target_hidden)
    w.add_uint32("gemma4-assistant.nextn_predict_layers", 2)
    tokens, scores, types = vocabulary()
    add_tokenizer(w, tokens, scores, types)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    tensors = {
        "token_embd.weight": mat(len(tokens), n_embd),
        "output_norm.weight": np.ones(n_embd, np.float32),
        "nextn.pre_projection.weight": mat(n_embd, 2 * target_hidden),
        "nextn.post_projection.weight": mat(target_hidden, n_embd),
        "rope_freqs.weight": np.ones(head // 2, np.float32),
    }
    for i in range(2):
        tensors.update(_gemma4_layer(mat, i, n_embd, kv=False))
    if output is not None:
        tensors["token_embd.weight"] = np.ascontiguousarray(output[:, :n_embd])
        passing = np.zeros((n_embd, 2 * target_hidden), np.float32)
        passing[:, :n_embd] = np.eye(n_embd, dtype=np.float32)
        tensors["nextn.pre_projection.weight"] = passing
        for i in range(2):
            tensors[f"blk.{i}.attn_output.weight"] *= 0
            tensors[f"blk.{i}.ffn_down.weight"] *= 0
    finish(w, tensors)
    return path


def write_gemma4_pair(
    target: Path, assistant: Path, logit_scale: float = 3.0, seed: int = 13
) -> tuple[Path, Path]:
    """A tiny bigram Gemma 4 (`logit_scale` its output rows' size) and an assistant that drafts what
    it will say, less sure than it."""
    rng = np.random.default_rng(seed)
    output = (rng.standard_normal((len(vocabulary()[0]), 64)) * logit_scale / 8).astype(np.float32)
    output[:, 32:] = 0
    return write_gemma4(target, seed, output), write_assistant(assistant, output=output)
