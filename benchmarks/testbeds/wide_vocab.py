"""The testbed at real vocabulary widths: every GGUF of a testbed folder (make_testbed.py) copied
with its vocabulary padded to 152,064 ids (Qwen2.5's) and to 262,144 (Gemma 3's), so that loading,
sampling and verification pay what real vocabularies cost.

    python -m benchmarks.testbeds.wide_vocab testbed [--widths 152064,262144]
        [--files target-f16.gguf,draft-q4_1.gguf]

writes testbed/v152k/*.gguf and testbed/v262k/*.gguf. The new ids are `[PAD<i>]` tokens of type
UNUSED whose embedding (and, the embeddings being tied, output) rows copy the row of the file's
least likely token: the one whose largest probability, over the file's own generation states on a
few prompts, is the smallest of any token's (about 1e-7 here). A padded id then takes about as
little of the probability as real models give their unused ids, and the padded model is the
original in distribution, not only in its greedy output: a controller's choices on it are the
original's, and only the width's cost differs. Before the folder is left, the padded model's greedy
output is checked against the original's on other prompts, target by target, and the largest share
of the probability that the padded ids took together where it generated is printed."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from benchmarks.harness import models, options
from localspec.engine.events import DoneEvent
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.session.prompt import prompt_tokens

EMBEDDINGS = "token_embd.weight"
SEPARATE_OUTPUT = "output.weight"
CHECK_PROMPTS = ("Why is the sky blue?", "Write a haiku about autumn.", "def fibonacci(n):")
CHECK_TOKENS = 48
STATE_PROMPTS = (
    "Translate to German: the cat sat on the mat.",
    "List three prime numbers and explain why.",
    "Summarize the plot of Hamlet in two sentences.",
    "SELECT name FROM users WHERE",
    "Write a short email declining a meeting.",
    "What is 17 times 23? Show your steps.",
    "Explain recursion to a child.",
    "Give me a JSON object with a name and an age.",
)


def _least_likely_row(source: Path, texts: list[tuple[str, str]], extra: int) -> np.ndarray:
    """`extra` copies of the source's embedding row whose token was least likely wherever the source
    generated after each prompt of `texts` (prompt, reply): the largest of its log-probabilities
    there is the smallest of any token's. (Inside a prompt the states can point anywhere: nothing is
    drawn there.)"""
    from functools import partial

    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(
        str(source), embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE, n_ctx=1024, verbose=False
    )
    # The texts hold the chat template's tokens
    llm.tokenize = partial(Llama.tokenize, llm, add_bos=False, special=True)
    try:
        states = np.concatenate(
            [
                np.asarray(llm.embed(prompt + reply), dtype=np.float32)[
                    len(llm.tokenize(prompt.encode())) - 1 :
                ]
                for prompt, reply in texts
            ]
        )
    finally:
        llm.close()
    embeddings = _rows_f32(gguf.GGUFReader(str(source)), EMBEDDINGS)
    least = int(_log_softmax(states @ embeddings.T).max(axis=0).argmin())
    return np.repeat(embeddings[least : least + 1], extra, axis=0)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    """Each row's log-probabilities, in float64."""
    logits = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def _rows_f32(reader: gguf.GGUFReader, name: str) -> np.ndarray:
    tensor = next(t for t in reader.tensors if t.name == name)
    data = np.asarray(tensor.data)
    if tensor.tensor_type in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32):
        return data.astype(np.float32)
    return gguf.quants.dequantize(data, tensor.tensor_type).astype(np.float32)


def _in_format(rows: np.ndarray, kind: gguf.GGMLQuantizationType) -> np.ndarray:
    if kind == gguf.GGMLQuantizationType.F16:
        return rows.astype(np.float16)
    if kind == gguf.GGMLQuantizationType.F32:
        return rows.astype(np.float32)
    if kind == gguf.GGMLQuantizationType.Q8_0:
        return gguf.quants.quantize(rows, kind)
    raise SystemExit(f"no padded rows in {kind.name} embeddings")


def pad(src: Path, dst: Path, width: int, rows: np.ndarray) -> None:
    reader = gguf.GGUFReader(str(src))
    n = len(reader.fields["tokenizer.ggml.tokens"].contents())
    extra = width - n
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
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.name == EMBEDDINGS:
            data = np.concatenate([data, _in_format(rows[:extra], t.tensor_type)])
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def greedy(
    path: Path, n_real: int, prompts: tuple[str, ...] = CHECK_PROMPTS
) -> tuple[list[list[int]], float, list[tuple[str, str]]]:
    """The greedy outputs on `prompts`, the largest probability that ids past `n_real` took where
    they were generated, and each prompt and output as text (the chat template's tokens written out)."""
    config = GenerationConfig(
        max_tokens=CHECK_TOKENS, sampling=SamplingParams(temperature=0.0), draft_mode="fixed"
    )
    with models.load(path, n_ctx=512) as model:
        engine = SpeculativeEngine(model, None)
        outs, padded, texts = [], 0.0, []
        for text in prompts:
            prompt = prompt_tokens(model, text, raw=False)
            done = [e for e in engine.generate(prompt, config) if isinstance(e, DoneEvent)]
            outs.append(done[0].tokens)
            model.truncate(0)
            probs = np.exp(
                _log_softmax(model.decode([*prompt, *done[0].tokens], all_logits=True)[len(prompt) - 1 :])
            )
            model.truncate(0)
            padded = max(padded, float(probs[:, n_real:].sum(axis=1).max()))
            texts.append(
                tuple(
                    b"".join(map(model.piece, part)).decode("utf-8", "replace")
                    for part in (prompt, done[0].tokens)
                )
            )
    return outs, padded, texts


def main() -> None:
    ap = options.parser(__doc__)
    options.add_testbed(ap)
    ap.add_argument("--widths", type=options.csv(int), default="152064,262144")
    ap.add_argument(
        "--files",
        type=options.csv(str),
        help="only these files of the folder, comma-separated (default: all)",
    )
    args = options.parse(ap)
    # The MTP testbed (make_mtp_testbed.py) shares the folder; its output matrix is not tied.
    sources = sorted(p for p in args.testbed.glob("*.gguf") if not p.name.startswith("mtp-"))
    if args.files:
        sources = [p for p in sources if p.name in args.files]
    if not sources:
        raise SystemExit(
            f"no GGUF files in {args.testbed}: run ../shared/bench/make_testbed.py {args.testbed} first"
        )
    widths = args.widths
    light = args.testbed / "target-f16.gguf"
    n = len(gguf.GGUFReader(str(light)).fields["tokenizer.ggml.tokens"].contents())
    if min(widths) <= n:
        raise SystemExit(f"{light} already has {n} tokens")
    texts: list[tuple[str, str]] = []  # where the light target generates, on other prompts than the check's
    for src in sources:
        rows = None  # the same rows for every width of a file (a wider one has more of them)
        for width in widths:
            folder = args.testbed / f"v{width // 1000}k"
            folder.mkdir(exist_ok=True)
            dst = folder / src.name
            if not dst.exists():
                texts = texts or greedy(light, n, STATE_PROMPTS)[2]
                rows = rows if rows is not None else _least_likely_row(src, texts, max(widths) - n)
                pad(src, dst.with_suffix(".partial"), width, rows)
                dst.with_suffix(".partial").rename(dst)
            # The heavy target computes what the light one does: checking the light one is enough.
            if "heavy" not in src.name:
                (before, _, _), (after, padded, _) = greedy(src, n), greedy(dst, n)
                print(
                    f"{dst}: {width} ids, greedy output "
                    f"{'the same as' if before == after else 'DIFFERENT from'} "
                    f"{src.name}; padded ids took at most {padded:.1e} of the probability where it was "
                    "generated"
                )
                if before != after:
                    raise SystemExit(1)


if __name__ == "__main__":
    main()
