"""What a drafter written for a target copies from the target's GGUF: its header values (with their
GGUF types), and its tokenizer's keys as they are."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def read_target(path: Path, embeddings: bool = False) -> tuple[dict, dict, np.ndarray | None]:
    """The target's header values, their GGUF types, and (`embeddings`) its token embeddings."""
    reader = gguf.GGUFReader(str(path))
    named = {name: field for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    fields = {name: field.contents() for name, field in named.items()}
    types = {name: field.types for name, field in named.items()}
    embd = None
    if embeddings:
        embd = np.array(
            next(t for t in reader.tensors if t.name == "token_embd.weight").data, dtype=np.float32
        )
    return fields, types, embd


def copy_tokenizer(w: gguf.GGUFWriter, fields: dict, types: dict) -> None:
    for name, value in fields.items():
        if name.startswith("tokenizer."):
            kind = types[name]
            w.add_key_value(name, value, kind[0], sub_type=kind[-1] if len(kind) > 1 else None)
