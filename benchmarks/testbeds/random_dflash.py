"""Write an untrained DFlash block drafter for a llama-family target: the shape of a real one (the
target's width, `--blocks` decoder layers, reading `--read` of the target's layers, blocks of
`--block` tokens), random weights. What it measures: the cost of a DFlash call beside the
target's passes on this machine (what a trained one would cost), and what a drafter that never
pays costs the person under `auto`. No trained DFlash drafter exists for the testbed.

    python -m benchmarks.testbeds.random_dflash testbed/target-heavy-f16.gguf \\
        --out testbed/dflash-random.gguf [--blocks 5] [--read 5] [--block 16]"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from benchmarks.harness import options
from benchmarks.testbeds.target_header import copy_tokenizer, read_target

HEAD_DIM = 64


def spread(n_layers: int, n: int) -> list[int]:
    """n of the target's layers, low to high (DFlash drafters read from the first to the last)."""
    return sorted({round(1 + i * (n_layers - 3) / max(n - 1, 1)) for i in range(n)})


def _mat(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float16)


def write(path: Path, target: Path, blocks: int, read: int, block: int) -> Path:
    fields, types = read_target(target)[:2]
    arch = fields["general.architecture"]
    n_embd, n_ff = fields[f"{arch}.embedding_length"], fields[f"{arch}.feed_forward_length"]
    n_head, n_kv = fields[f"{arch}.attention.head_count"], fields[f"{arch}.attention.head_count_kv"]
    layers = spread(fields[f"{arch}.block_count"], read)
    w = gguf.GGUFWriter(str(path), "dflash")
    w.add_name("dflash-random")
    w.add_block_count(blocks)
    for key in ("context_length", "embedding_length", "feed_forward_length", "rope.dimension_count"):
        w.add_uint32(f"dflash.{key}", fields[f"{arch}.{key}"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(fields.get(f"{arch}.rope.freq_base", 10000.0))
    w.add_layer_norm_rms_eps(fields[f"{arch}.attention.layer_norm_rms_epsilon"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_array("dflash.target_layers", layers)
    w.add_uint32("dflash.block_size", block)
    copy_tokenizer(w, fields, types)
    if "tokenizer.ggml.mask_token_id" not in fields:
        w.add_mask_token_id(fields.get("tokenizer.ggml.unknown_token_id", 0))  # any id: untrained
    rng = np.random.default_rng(0)
    ones = np.ones(n_embd, np.float32)
    w.add_tensor("fc.weight", _mat(rng, n_embd, len(layers) * n_embd))
    w.add_tensor("enc.output_norm.weight", ones)
    w.add_tensor("output_norm.weight", ones)
    for i in range(blocks):
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight", ones)
        for name in ("attn_q_norm", "attn_k_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight", np.ones(HEAD_DIM, np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", _mat(rng, n_head * HEAD_DIM, n_embd))
        w.add_tensor(f"blk.{i}.attn_k.weight", _mat(rng, n_kv * HEAD_DIM, n_embd))
        w.add_tensor(f"blk.{i}.attn_v.weight", _mat(rng, n_kv * HEAD_DIM, n_embd))
        w.add_tensor(f"blk.{i}.attn_output.weight", _mat(rng, n_embd, n_head * HEAD_DIM))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", _mat(rng, n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", _mat(rng, n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", _mat(rng, n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    ap.add_argument("--out", type=Path, required=True, help="the dflash GGUF to write")
    ap.add_argument("--blocks", type=int, default=5, help="decoder layers (DFlash drafters have 5)")
    ap.add_argument("--read", type=int, default=5, help="target layers read")
    ap.add_argument("--block", type=int, default=16, help="tokens a block (the anchor and its masks)")
    a = options.parse(ap)
    print(write(a.out, a.target, a.blocks, a.read, a.block))


if __name__ == "__main__":
    main()
