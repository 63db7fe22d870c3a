"""Training data for an EAGLE-3 head on the testbed's target: the dev prompts (chat-templated) and
the target's own replies (greedy, or sampled with --temp and --seed for more of them), each
sequence passed through the target once with the inputs of three of its layers handed out
(llama.cpp's layer inputs, what the head reads when it drafts), and the target's TOP most likely
tokens and their logits at every position (what the head learns to predict one step further: the
first is the target's greedy token).
Each category's first --skip prompts are left out: the benchmarks measure on them (`--limit`
takes a category's first prompts), so the head is measured on prompts it was not trained on.

    python -m benchmarks.testbeds.eagle3_data testbed/target-f16.gguf --prompts specbench-dev.jsonl \\
        --out eagle3-data.npz [--layers 2,15,27] [--limit 120] [-n 80] [--max-prompt 600] \\
        [--temp 0.8 --seed 1]

The heavy testbed target computes the light one's function (its extra layers are no-ops), so the
light target's layers and tokens serve for both. Writes tokens, top_ids and top_logits, features
(float16) of all sequences, where each starts and where its prompt ends; `train_eagle3` reads it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import llama_cpp
import numpy as np

from benchmarks.harness import options
from localspec.backend.layer_inputs import hand_out_layer_inputs, joined_layer_inputs
from localspec.backend.model import Model
from localspec.backend.model_options import ModelOptions
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.session.prompt import prompt_tokens

CHUNK = 512
TOP = 8  # of the target's most likely tokens, kept a position: the head learns their odds


def _features(target: Model, tokens: list[int], layers: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """The layers' inputs (n, len(layers) * n_embd), and the target's TOP most likely tokens and
    their logits (n, TOP) at each position, from a context of their own over the target's weights."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = max(CHUNK, len(tokens))
    params.n_threads = params.n_threads_batch = target.threads
    ctx = llama_cpp.llama_init_from_model(target.model, params)
    hand_out_layer_inputs(ctx, layers)
    width = llama_cpp.llama_model_n_embd(target.model)
    batch = llama_cpp.llama_batch_init(CHUNK, 0, 1)
    rows, ids, values = [], [], []
    try:
        for start in range(0, len(tokens), CHUNK):
            part = tokens[start : start + CHUNK]
            for i, token in enumerate(part):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
                batch.seq_id[i][0], batch.logits[i] = 0, True
            batch.n_tokens = len(part)
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise SystemExit("llama_decode failed")
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx), shape=(len(part), target.n_vocab))
            top = np.argpartition(-logits, TOP, axis=1)[:, :TOP]
            top = np.take_along_axis(
                top, np.argsort(-np.take_along_axis(logits, top, axis=1), axis=1), axis=1
            )
            ids.append(top.astype(np.int32))
            values.append(np.take_along_axis(logits, top, axis=1).astype(np.float16))
            rows.append(joined_layer_inputs(ctx, layers, len(part), width).astype(np.float16))
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
    return np.concatenate(rows), np.concatenate(ids), np.concatenate(values)


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_prompts(ap, limit=10)
    options.add_generation(ap, n=80)
    ap.add_argument(
        "--seed", type=int, default=0, help="of sampled replies (--temp above 0): another seed, other data"
    )
    ap.add_argument("--out", type=Path, required=True, help="the .npz to write")
    ap.add_argument("--layers", type=options.csv(int), default="2,15,27", help="the target layers read")
    ap.add_argument("--max-prompt", type=int, default=600, help="longer prompts are skipped")
    ap.add_argument(
        "--skip",
        type=int,
        default=3,
        help="each category's first prompts, left out (what benchmarks measure on)",
    )
    a = options.parse(ap)
    target = Model(a.target, ModelOptions(n_ctx=2048, n_threads=2, n_threads_batch=2))
    engine = SpeculativeEngine(target, None)
    sampling = SamplingParams(temperature=a.temp)
    config = GenerationConfig(max_tokens=a.n, sampling=sampling, draft_mode="fixed", seed=a.seed)
    seqs, feats, top_ids, top_logits, prompts, taken, seen = [], [], [], [], [], Counter(), Counter()
    for line in a.prompts.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        category = row["category"]
        seen[category] += 1
        if (
            seen[category] <= a.skip
            or taken[category] >= a.limit
            or (a.category and category not in a.category)
        ):
            continue
        prompt = prompt_tokens(target, row["turns"][0], raw=False)
        if len(prompt) > a.max_prompt:
            continue
        taken[category] += 1
        tokens = [*prompt, *drain(engine.generate(prompt, config)).tokens]
        rows, ids, values = _features(target, tokens, tuple(a.layers))
        seqs.append(np.asarray(tokens, dtype=np.int32))
        prompts.append(len(prompt))
        feats.append(rows)
        top_ids.append(ids)
        top_logits.append(values)
        print(f"{len(seqs)}: {category}, {len(tokens)} tokens", flush=True)
    starts = np.cumsum([0, *(len(s) for s in seqs)])
    np.savez(
        a.out,
        tokens=np.concatenate(seqs),
        top_ids=np.concatenate(top_ids),
        top_logits=np.concatenate(top_logits),
        features=np.concatenate(feats),
        starts=starts,
        prompt_ends=starts[:-1] + np.asarray(prompts),
        layers=np.asarray(a.layers, dtype=np.int32),
    )
    target.close()
    print(f"wrote {a.out}: {starts[-1]} tokens in {len(seqs)} sequences")


if __name__ == "__main__":
    main()
