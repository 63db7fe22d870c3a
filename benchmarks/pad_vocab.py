"""Write a copy of a GGUF whose vocabulary is padded with N unused tokens, as Qwen2.5 7B/32B (152064
rows against 0.5B's 151936) and Gemma 3 27B (262208 against 1B's 262144) are: `[PAD<i>]` tokens
with zero embedding rows (the output matrix too, when it is separate), so that a padded model
computes the same function and gives its extra ids logit 0.

    python benchmarks/pad_vocab.py IN.gguf OUT.gguf [N=64]

Quantised rows are padded with zero bytes, which every block format decodes as zeros."""

from __future__ import annotations

import sys

import gguf
import numpy as np

PADDED = ("token_embd.weight", "output.weight")


def pad_vocab(src: str, dst: str, n: int) -> None:
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            value = [*value, *(f"[PAD{i}]" for i in range(n))]
        elif key == "tokenizer.ggml.token_type":
            value = [*value, *([int(gguf.TokenType.UNUSED)] * n)]
        elif key == "tokenizer.ggml.scores":
            value = [*value, *([-1000.0] * n)]
        sub_type = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, value, field.types[0], sub_type)
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.name in PADDED:
            data = np.concatenate([data, np.zeros((n, *data.shape[1:]), dtype=data.dtype)])
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    pad_vocab(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 64)
