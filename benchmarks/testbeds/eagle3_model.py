"""A llama target and an EAGLE-3 head that predicts what it will: the tests' tiny EAGLE-3 pair (and
a testbed for drafting with a head, until a trained one exists).

The target's real work is its first block; the blocks after it are no-ops (their attention output
and FFN down projections are zero). Its token embeddings are small (RMS `embd_scale`), so its
output at p is, nearly, its first block's attention and FFN over the normalised embeddings up to p.
The head's decoder layer holds that block: its Q, K and V read the token's normalised embedding
(the half of their input that is the target's features is zeroed), and with llama.cpp's
`norm_before_residual` its residual is the normalised g row scaled by `attn_norm_2` (`g_weight`):
0 leaves the head computing what the target will at the next position; more adds the target's
state at the position before (the input of its second layer, which `fc` passes through), so that
what it predicts depends on being handed the right rows. `head_noise` perturbs the head's copy of
the block, so that its greedy acceptance is high but not perfect."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

Vocabulary = Callable[[gguf.GGUFWriter], int]  # writes the tokenizer's keys, returns the vocabulary size


@dataclass(frozen=True)
class Eagle3Spec:
    seed: int = 0
    n_embd: int = 64
    n_head: int = 4
    n_ff: int = 128
    n_layer: int = 4  # the target's blocks: the first is real, the rest no-ops
    n_ctx: int = 2048
    logit_scale: float = 3.0  # std of the output rows: large = confident logits
    embd_scale: float = 0.01  # RMS of the target's embeddings: small, the residual the head lacks
    head_noise: float = 0.0  # relative noise on the head's copy of the first block
    g_weight: float = 0.0  # how much of the target's state the head's residual takes
    layers: tuple[int, int, int] = (0, 1, 3)  # what the head reads; `fc` passes the second through
    f16: bool = False


def _mat(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)


def _block(rng: np.random.Generator, spec: Eagle3Spec) -> dict[str, np.ndarray]:
    e, f = spec.n_embd, spec.n_ff
    return {
        "attn_q": _mat(rng, e, e),
        "attn_k": _mat(rng, e, e),
        "attn_v": _mat(rng, e, e),
        "attn_output": _mat(rng, e, e),
        "ffn_gate": _mat(rng, f, e),
        "ffn_up": _mat(rng, f, e),
        "ffn_down": _mat(rng, e, f),
    }


def _target(spec: Eagle3Spec, n_vocab: int, rng: np.random.Generator) -> tuple[dict, dict]:
    e = spec.n_embd
    embd = rng.standard_normal((n_vocab, e)).astype(np.float32)
    embd *= spec.embd_scale / np.sqrt((embd**2).mean(axis=1, keepdims=True))
    ones = np.ones(e, dtype=np.float32)
    w = {
        "token_embd.weight": embd,
        "output_norm.weight": ones,
        "output.weight": (rng.standard_normal((n_vocab, e)) * spec.logit_scale).astype(np.float32),
    }
    real = _block(rng, spec)
    for i in range(spec.n_layer):
        block = real if i == 0 else _block(rng, spec)
        if i:
            block["attn_output"] = np.zeros_like(block["attn_output"])
            block["ffn_down"] = np.zeros_like(block["ffn_down"])
        w.update({f"blk.{i}.{name}.weight": value for name, value in block.items()})
        w[f"blk.{i}.attn_norm.weight"] = w[f"blk.{i}.ffn_norm.weight"] = ones
    return w, real


def _head(spec: Eagle3Spec, real: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    e = spec.n_embd
    block = {
        name: value + spec.head_noise * np.std(value) * rng.standard_normal(value.shape).astype(np.float32)
        for name, value in real.items()
    }
    fc = np.zeros((e, 3 * e), dtype=np.float32)
    fc[:, e : 2 * e] = np.eye(e, dtype=np.float32)
    w = {"fc.weight": fc, "output_norm.weight": np.ones(e, dtype=np.float32)}
    for name in ("attn_q", "attn_k", "attn_v"):  # the features' half of their input is not read
        w[f"blk.0.{name}.weight"] = np.concatenate([block[name], np.zeros_like(block[name])], axis=1)
    for name in ("attn_output", "ffn_gate", "ffn_up", "ffn_down"):
        w[f"blk.0.{name}.weight"] = block[name]
    w["blk.0.attn_norm.weight"] = w["blk.0.ffn_norm.weight"] = np.ones(e, dtype=np.float32)
    w["blk.0.attn_norm_2.weight"] = np.full(e, spec.g_weight, dtype=np.float32)
    return w


def add_header(
    w: gguf.GGUFWriter, n_layer: int, n_embd: int, n_head: int, n_ff: int, n_ctx: int, eps: float, f16: bool
) -> None:
    """A llama-shaped model's hyper-parameters (as many KV heads as heads): the target's and its
    head's here, and the tests' tiny drafters'."""
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)


def finish(w: gguf.GGUFWriter, tensors: dict[str, np.ndarray], f16: bool = False) -> None:
    """Add `tensors` (matrices in F16 with `f16`) and write the file."""
    for name, value in tensors.items():
        w.add_tensor(name, value.astype(np.float16) if value.ndim > 1 and f16 else value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _writer(path: Path, arch: str, spec: Eagle3Spec, vocabulary: Vocabulary, n_layer: int) -> gguf.GGUFWriter:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"{arch}-test")
    vocabulary(w)
    add_header(w, n_layer, spec.n_embd, spec.n_head, spec.n_ff, spec.n_ctx, 1e-6, spec.f16)
    return w


def write_eagle3_pair(
    target: Path, head: Path, spec: Eagle3Spec, vocabulary: Vocabulary
) -> tuple[Path, Path]:
    """Write the target and its head, both with the tokenizer `vocabulary` writes."""
    rng = np.random.default_rng(spec.seed)
    probe = gguf.GGUFWriter(str(target), "llama")
    n_vocab = vocabulary(probe)
    probe.close()
    weights, real = _target(spec, n_vocab, rng)
    finish(_writer(target, "llama", spec, vocabulary, spec.n_layer), weights, spec.f16)
    w = _writer(head, "eagle3", spec, vocabulary, 1)
    w.add_array("eagle3.target_layers", list(spec.layers))
    w.add_uint32("eagle3.target_hidden_size", spec.n_embd)
    w.add_bool("eagle3.norm_before_residual", True)
    finish(w, _head(spec, real, rng), spec.f16)
    return target, head
