"""What a target pass costs by its width and the context before it, with flash attention on and
off: the shape speculation lives by (a verification of k+1 tokens against one token), and the
prompt pass that fills the context.

    python -m benchmarks.costs.pass_shape TARGET.gguf [--contexts 100,2000,4000,7000]
        [--widths 1,3,5,9] [--flash-attn off,on] [--repeat 4]

For each flash-attention setting and context length, one model reads a prompt of that many tokens
(timed), then runs passes of every width after it, interleaved, each rolled back; prints the
median milliseconds of each width and its cost relative to the first width's (one token's), and how
far the widest pass's logits lie from the same tokens' evaluated one by one (the largest difference
over its rows: what makes drafted greedy output part from the target alone's at near-ties)."""

from __future__ import annotations

import time

import numpy as np

from benchmarks.harness import models, options
from benchmarks.harness.summary import median, table
from localspec.backend.model import Model


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    ap.add_argument("--contexts", type=options.csv(int), default="100,2000,4000,7000")
    ap.add_argument("--widths", type=options.csv(int), default="1,3,5,9")
    ap.add_argument("--flash-attn", type=options.csv(str), default="off,on")
    options.add_repeat(ap, 4)
    a = options.parse(ap)
    cells = []
    for fa in a.flash_attn:
        for context in a.contexts:
            with models.load(a.target, n_ctx=context + 256, flash_attn=fa) as model:
                tokens = [(i * 7919) % (model.n_vocab - 200) + 100 for i in range(context)]
                t0 = time.perf_counter()
                model.prefill(tokens)
                prompt_s = time.perf_counter() - t0
                seconds: dict[int, list[float]] = {w: [] for w in a.widths}
                for _ in range(a.repeat):
                    for w in a.widths:
                        t0 = time.perf_counter()
                        model.decode([tokens[-1], *[tokens[-2]] * (w - 1)], all_logits=True)
                        seconds[w].append(time.perf_counter() - t0)
                        model.truncate(context)
                drift = batch_drift(model, tokens, max(a.widths))
            one = median(seconds[a.widths[0]])
            passes = [f"{1e3 * median(s):.0f} ms ({median(s) / one:.2f}x)" for s in seconds.values()]
            cells.append([fa, context, f"{prompt_s:.2f} s", *passes, f"{drift:.3f}"])
            print(" | ".join(map(str, cells[-1])), flush=True)
    widths = [f"{w} tokens" for w in a.widths]
    apart = f"logits, {max(a.widths)} at once vs one by one"
    print("\n" + table(["flash attention", "context", "prompt pass", *widths, apart], cells))


def batch_drift(model: Model, tokens: list[int], width: int) -> float:
    """The largest difference between the logits of `width` tokens evaluated in one pass after
    `tokens` and the same tokens' evaluated one by one."""
    after = [tokens[(i * 31) % len(tokens)] for i in range(width)]
    batched = np.array(model.decode(after, all_logits=True), dtype=np.float32)
    model.truncate(len(tokens))
    single = np.stack([np.array(model.decode([t], all_logits=False)).reshape(-1) for t in after])
    model.truncate(len(tokens))
    return float(np.abs(batched - single).max())


if __name__ == "__main__":
    main()
