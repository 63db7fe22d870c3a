#!/usr/bin/env python3
"""The testbed at real vocabulary widths: every GGUF of a testbed folder (make_testbed.py) copied
with its vocabulary padded to 152,064 ids (Qwen2.5's) and to 262,144 (Gemma 3's), so that loading,
sampling and verification pay what real vocabularies cost.

    python benchmarks/wide_vocab.py testbed [--widths 152064,262144]

writes testbed/v152k/*.gguf and testbed/v262k/*.gguf. The new ids are `[PAD<i>]` tokens of type
UNUSED whose embedding (and, the embeddings being tied, output) rows are half of a random existing
row, in the row's own format (F16 scaled; Q8_0's block scales halved). A padded id's logit is then
half of a real id's, so whenever the top logit is positive the padded model picks what the
original picks: its greedy output is checked against the original's on a few prompts, target by
target, before the folder is left."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EMBEDDINGS = "token_embd.weight"
SEPARATE_OUTPUT = "output.weight"
CHECK_PROMPTS = ("Why is the sky blue?", "Write a haiku about autumn.", "def fibonacci(n):")
CHECK_TOKENS = 48


def _halved(rows: np.ndarray, kind: gguf.GGMLQuantizationType) -> np.ndarray:
    rows = rows.copy()
    if kind in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32):
        rows *= 0.5
    elif kind == gguf.GGMLQuantizationType.Q8_0:
        block, size = gguf.GGML_QUANT_SIZES[kind]
        blocks = rows.reshape(len(rows), -1, size)
        scales = np.ascontiguousarray(blocks[..., :2]).view(np.float16) * np.float16(0.5)
        blocks[..., :2] = scales.view(np.uint8)
    else:
        raise SystemExit(f"no row scaling for {kind.name} embeddings")
    return rows


def pad(src: Path, dst: Path, width: int, seed: int = 0) -> None:
    reader = gguf.GGUFReader(str(src))
    n = len(reader.fields["tokenizer.ggml.tokens"].contents())
    extra = width - n
    if extra <= 0:
        raise SystemExit(f"{src} already has {n} tokens")
    if SEPARATE_OUTPUT in {t.name for t in reader.tensors}:
        raise SystemExit(f"{src} has an output matrix of its own: only tied embeddings are padded here")
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            value = [*value, *(f"[PAD{i}]" for i in range(extra))]
        elif key == "tokenizer.ggml.token_type":
            value = [*value, *([int(gguf.TokenType.UNUSED)] * extra)]
        elif key == "tokenizer.ggml.scores":
            value = [*value, *([-1000.0] * extra)]
        sub_type = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, value, field.types[0], sub_type)
    copied = np.random.default_rng(seed).integers(0, n, extra)  # the same rows for every file of a width
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.name == EMBEDDINGS:
            data = np.concatenate([data, _halved(data[copied], t.tensor_type)])
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def greedy(path: Path) -> list[list[int]]:
    from localspec.backend.hardware import physical_cores
    from localspec.backend.model import Model, ModelOptions
    from localspec.engine.events import DoneEvent
    from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
    from localspec.sampling.dist import SamplingParams
    from localspec.session.prompt import prompt_tokens

    cores = physical_cores()
    config = GenerationConfig(max_tokens=CHECK_TOKENS, sampling=SamplingParams(temperature=0.0), draft_mode="fixed")
    with Model(path, ModelOptions(n_ctx=512, n_threads=cores, n_threads_batch=cores)) as model:
        engine = SpeculativeEngine(model, None)
        outs = []
        for text in CHECK_PROMPTS:
            done = [e for e in engine.generate(prompt_tokens(model, text, raw=False), config) if isinstance(e, DoneEvent)]
            outs.append(done[0].tokens)
    return outs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("testbed", type=Path)
    ap.add_argument("--widths", default="152064,262144")
    args = ap.parse_args()
    # The MTP testbed (make_mtp_testbed.py) shares the folder; its output matrix is not tied.
    sources = sorted(p for p in args.testbed.glob("*.gguf") if not p.name.startswith("mtp-"))
    if not sources:
        raise SystemExit(f"no GGUF files in {args.testbed}: run ../shared/bench/make_testbed.py {args.testbed} first")
    for width in (int(w) for w in args.widths.split(",")):
        folder = args.testbed / f"v{width // 1000}k"
        folder.mkdir(exist_ok=True)
        for src in sources:
            dst = folder / src.name
            if not dst.exists():
                pad(src, dst.with_suffix(".partial"), width)
                dst.with_suffix(".partial").rename(dst)
            # The heavy target computes what the light one does: checking the light one is enough.
            if "heavy" not in src.name:
                same = greedy(src) == greedy(dst)
                print(f"{dst}: {width} ids, greedy output {'the same as' if same else 'DIFFERENT from'} {src.name}")
                if not same:
                    raise SystemExit(1)


if __name__ == "__main__":
    main()
