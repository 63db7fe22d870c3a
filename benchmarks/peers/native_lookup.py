"""Native llama.cpp's cross-request lookup on the regenerate workload of
benchmarks/drafters/repeated_workloads.py: `llama-lookup --lookup-cache-dynamic FILE` keeps n-gram
counts of earlier generations in FILE.

Needs the native tools (bash ../shared/bench/build_native.sh /tmp/native).
    python -m benchmarks.peers.native_lookup TARGET.gguf --native /tmp/native --prompts FILE.jsonl
        [--count 13] [-n 128]

Per prompt (rendered with the model's chat template, as localspec sends it), interleaved: the
target alone (llama-completion), llama-lookup without a dynamic cache (this request's n-grams),
and llama-lookup twice with a fresh dynamic cache file, the second run measured. Prints per prompt
each rate and the medians of the ratios to the target alone."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.drafters.repeated_workloads import by_category, rows
from benchmarks.harness import models, native, options
from benchmarks.harness.summary import median


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_native(ap)
    ap.add_argument("--prompts", type=Path, required=True, help="a Spec-Bench JSONL file")
    ap.add_argument("--count", type=int, default=13)
    options.add_generation(ap, temp=False)
    a = options.parse(ap)
    data = rows(a.prompts)
    chosen = by_category(data, 1, False)[: a.count] + by_category(data, 1, True)[: max(0, a.count - 5)]
    with models.load(a.target) as m:
        rendered = [(r["category"], models.chat_text(m, r["turns"][0])) for r in chosen]
    plain, dynamic = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (category, text) in enumerate(rendered):
            f, cache = native.prompt_file(Path(tmp), str(i), text), Path(tmp) / f"{i}.bin"
            base = native.completion(a.native, a.target, f, a.n)
            lookup = ["-m", str(a.target), "-f", str(f), *native.common(a.n)]
            own = native.rate(
                native.DECODED_RE, native.run(a.native, "llama-lookup", *lookup), "llama-lookup"
            )
            native.run(a.native, "llama-lookup", *lookup, "-lcd", str(cache))
            out = native.run(a.native, "llama-lookup", *lookup, "-lcd", str(cache))
            again = native.rate(native.DECODED_RE, out, "llama-lookup")
            plain.append(own / base)
            dynamic.append(again / base)
            print(
                f"{category:14} target {base:6.1f}  lookup {own:6.1f}  lookup-dynamic (second run) "
                f"{again:6.1f} tok/s",
                flush=True,
            )
    print(
        f"median: lookup/target {median(plain):.2f}x, lookup-dynamic second run/target "
        f"{median(dynamic):.2f}x, "
        f"dynamic/plain {median(d / p for d, p in zip(dynamic, plain, strict=True)):.2f}x"
    )


if __name__ == "__main__":
    main()
