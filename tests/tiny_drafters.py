"""Tiny drafters made for one target, written with `gguf` for the tiny llama target
(tiny_models.py): an EAGLE-3 head llama.cpp runs, and the headers of a DFlash or DSpark block
drafter and a Gemma 4 assistant (localspec refuses those before loading any weights, so their
tensors only need to be named)."""

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
    path: Path, layers: tuple[int, ...] = (0, 1), n_embd: int = 64, markov: bool = False
) -> Path:
    """A DFlash block drafter's header (DSpark's with `markov`: its Markov head's tensor)."""
    w = gguf.GGUFWriter(str(path), "dflash")
    _header(w, n_embd, 4, 128)
    w.add_array("dflash.target_layers", list(layers))
    w.add_uint32("dflash.block_size", 16)
    add_tokenizer(w, *vocabulary())
    w.add_tensor("fc.weight", np.zeros((n_embd, len(layers) * n_embd), np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, np.float32))
    if markov:
        w.add_tensor("markov_w1.weight", np.zeros((len(vocabulary()[0]), 8), np.float32))
    finish(w, {})
    return path


def write_assistant(path: Path, target_hidden: int = 64, n_embd: int = 32) -> Path:
    """A Gemma 4 assistant's header: an MTP drafter for a Gemma 4 target of hidden size
    `target_hidden` (its embedding_length_out)."""
    w = gguf.GGUFWriter(str(path), "gemma4-assistant")
    _header(w, n_embd, 4, 128)
    w.add_uint32("gemma4-assistant.embedding_length_out", target_hidden)
    add_tokenizer(w, *vocabulary())
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, np.float32))
    finish(w, {})
    return path
