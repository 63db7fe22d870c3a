"""A GGUF of an MTP architecture (llama.cpp's glm4moe, or mimo2 for several heads) whose NextN heads
predict what the main model will: the benchmark testbed for drafting with the target's own heads
(make_mtp_testbed.py), and the tests' tiny MTP models.

The main model's real work is its first block; the blocks after it are no-ops (their attention
output and FFN down projections are zero), which cost a real block's compute each, so a main pass
costs what `n_layer` blocks do. The NextN block holds the first block's weights and its `eh_proj`
passes the token's (normalised) embedding through (plus `h_weight` times the target's hidden state
before it, 0 by default): at position p it computes, from the tokens up to p, what the main model
computes there, one position ahead of the target. The embedding rows have RMS 1, so the head's
`enorm` leaves them as they are. `head_noise` perturbs the head's copy of the block, so that its
greedy acceptance is high but not perfect.

mimo2's heads are dense blocks, each a copy of the first (or a random block, `random_heads`).
glm4moe's NextN block is a mixture-of-experts layer: one routed expert (sigmoid gate, weights
normalised, so its weight is exactly 1) holds the first block's FFN, and the shared expert's down
projection is zero. The main blocks are dense (`leading_dense_block_count` is their number)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass(frozen=True)
class MtpSpec:
    seed: int = 0
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 4
    n_ff: int = 128
    n_layer: int = 2  # main blocks: the first is real, the rest no-ops
    n_ctx: int = 2048
    logit_scale: float = 1.0  # std of the output rows: large = confident logits
    head_noise: float = 0.0  # relative noise on the head's copy of the first block
    # How much of the target's hidden state the head adds to the token's embedding: 0 keeps the
    # head exact; more makes what it predicts depend on being handed the right states.
    h_weight: float = 0.0
    claimed_heads: int = 1  # the header's nextn_predict_layers (the file holds `heads`)
    f16: bool = False
    # "glm4moe" (one head: llama.cpp runs no more for it) or "mimo2", whose several heads this
    # llama.cpp chains, each drafting its own depth.
    arch: str = "glm4moe"
    heads: int = 1
    # Heads whose block is a random one, not the first block's copy: their drafts are mostly
    # rejected, which tells which head drafted a depth.
    random_heads: tuple[int, ...] = ()


Vocabulary = Callable[[gguf.GGUFWriter], int]  # writes the tokenizer's keys, returns the vocabulary size


def _block(rng: np.random.Generator, spec: MtpSpec) -> dict[str, np.ndarray]:
    e, f, hd = spec.n_embd, spec.n_ff, spec.n_embd // spec.n_head
    kv = hd * spec.n_head_kv

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    return {
        "attn_q": mat(e, e),
        "attn_k": mat(kv, e),
        "attn_v": mat(kv, e),
        "attn_output": mat(e, e),
        "ffn_gate": mat(f, e),
        "ffn_up": mat(f, e),
        "ffn_down": mat(e, f),
    }


def _weights(spec: MtpSpec, n_vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    e = spec.n_embd
    embd = rng.standard_normal((n_vocab, e)).astype(np.float32)
    embd /= np.sqrt((embd**2).mean(axis=1, keepdims=True))
    out = (rng.standard_normal((n_vocab, e)) * spec.logit_scale).astype(np.float32)
    w = {"token_embd.weight": embd, "output_norm.weight": np.ones(e, dtype=np.float32), "output.weight": out}
    real = _block(rng, spec)
    for i in range(spec.n_layer):
        block = real if i == 0 else _block(rng, spec)
        if i:
            block["attn_output"] = np.zeros_like(block["attn_output"])
            block["ffn_down"] = np.zeros_like(block["ffn_down"])
        w.update(_named(f"blk.{i}.", block, spec.arch))
    for k in range(spec.heads):
        copied = _block(rng, spec) if k in spec.random_heads else real
        head = {
            name: value
            + spec.head_noise * np.std(value) * rng.standard_normal(value.shape).astype(np.float32)
            for name, value in copied.items()
        }
        w.update(_head(f"blk.{spec.n_layer + k}.", head, spec))
    return w


def _named(p: str, block: dict[str, np.ndarray], arch: str) -> dict[str, np.ndarray]:
    """A dense block's tensors under the architecture's names (mimo2 fuses q, k and v)."""
    ones = np.ones(block["attn_q"].shape[1], dtype=np.float32)
    w = {p + "attn_norm.weight": ones, p + "attn_output.weight": block["attn_output"]}
    if arch == "mimo2":
        w[p + "attn_qkv.weight"] = np.concatenate([block["attn_q"], block["attn_k"], block["attn_v"]])
        w[p + "ffn_norm.weight"] = ones
    else:
        w.update({p + f"attn_{x}.weight": block[f"attn_{x}"] for x in "qkv"})
        w[p + "post_attention_norm.weight"] = ones
    w.update({p + f"{name}.weight": block[name] for name in ("ffn_gate", "ffn_up", "ffn_down")})
    return w


def _head(p: str, head: dict[str, np.ndarray], spec: MtpSpec) -> dict[str, np.ndarray]:
    e = spec.n_embd
    ones = np.ones(e, dtype=np.float32)
    w = _named(p, head, spec.arch)
    if spec.arch == "glm4moe":  # its NextN block is a mixture of experts: the dense FFN as the one expert
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            del w[p + f"{name}.weight"]
            w[p + f"{name}_exps.weight"] = head[name][None]
        w[p + "ffn_gate_inp.weight"] = np.zeros((1, e), dtype=np.float32)
        w[p + "exp_probs_b.bias"] = np.zeros(1, dtype=np.float32)
        w[p + "ffn_gate_shexp.weight"] = head["ffn_gate"]
        w[p + "ffn_up_shexp.weight"] = head["ffn_up"]
        w[p + "ffn_down_shexp.weight"] = np.zeros_like(head["ffn_down"])
    eh = np.zeros((e, 2 * e), dtype=np.float32)
    eh[:, :e] = np.eye(e, dtype=np.float32)
    eh[:, e:] = spec.h_weight * np.eye(e, dtype=np.float32)
    w[p + "nextn.eh_proj.weight"] = eh
    w[p + "nextn.enorm.weight"] = ones
    w[p + "nextn.hnorm.weight"] = ones
    w[p + "nextn.shared_head_norm.weight"] = ones
    return w


def write_mtp_model(path: Path, spec: MtpSpec, vocabulary: Vocabulary, name: str = "mtp-test") -> Path:
    """Write the model with the tokenizer `vocabulary` writes (tiny_models' or a real model's)."""
    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_name(name)
    n_vocab = vocabulary(w)
    w.add_block_count(spec.n_layer + spec.heads)  # the heads are the last blocks
    w.add_nextn_predict_layers(spec.claimed_heads)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_feed_forward_length(spec.n_ff)
    w.add_expert_feed_forward_length(spec.n_ff)
    if spec.arch == "glm4moe":
        w.add_leading_dense_block_count(spec.n_layer)
        w.add_expert_count(1)
        w.add_expert_used_count(1)
        w.add_expert_shared_count(1)
        w.add_expert_weights_scale(1.0)
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    else:
        # mimo2 has sliding-window layers: the no-op blocks are, a window as long as the context.
        w.add_sliding_window(spec.n_ctx)
        w.add_sliding_window_pattern([0 < i < spec.n_layer for i in range(spec.n_layer + spec.heads)])
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_dimension_count(spec.n_embd // spec.n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.f16 else gguf.LlamaFileType.ALL_F32)
    for tensor, value in _weights(spec, n_vocab).items():
        matrix = value.ndim > 1 and spec.f16
        w.add_tensor(tensor, value.astype(np.float16) if matrix else value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
