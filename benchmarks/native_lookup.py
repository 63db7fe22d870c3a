#!/usr/bin/env python3
"""Native llama.cpp's cross-request lookup on the regenerate workload of repeated_workloads.py:
`llama-lookup --lookup-cache-dynamic FILE` keeps n-gram counts of earlier generations in FILE.

Needs the native tools (bash ../shared/bench/build_native.sh /tmp/native).
Usage: python benchmarks/native_lookup.py TARGET.gguf --native /tmp/native --prompts FILE.jsonl
           [--count 13] [-n 128]
Per prompt (rendered with the model's chat template, as localspec sends it), interleaved: the
target alone (llama-completion), llama-lookup without a dynamic cache (this request's n-grams),
and llama-lookup twice with a fresh dynamic cache file, the second run measured. Prints per prompt
each rate and the medians of the ratios to the target alone."""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from native_compare import DECODED_RE, EVAL_RE, run
from repeated_workloads import by_category, rows

from localspec.backend.hardware import physical_cores
from localspec.backend.model import Model, ModelOptions
from localspec.session.prompt import render_chat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path)
    ap.add_argument("--native", type=Path, required=True)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--count", type=int, default=13)
    ap.add_argument("-n", type=int, default=128)
    a = ap.parse_args()
    t = str(physical_cores())
    common = ["-n", str(a.n), "--temp", "0", "-t", t, "-tb", t, "-c", "4096", "-ngl", "0"]
    data = rows(a.prompts)
    chosen = by_category(data, 1, False)[: a.count] + by_category(data, 1, True)[: max(0, a.count - 5)]
    with Model(a.target, ModelOptions(n_ctx=4096)) as m:
        rendered = [
            (r["category"], render_chat(m, [{"role": "user", "content": r["turns"][0]}])) for r in chosen
        ]
    plain, dynamic = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (category, text) in enumerate(rendered):
            f, cache = Path(tmp) / f"{i}.txt", Path(tmp) / f"{i}.bin"
            f.write_text(text + "\n")  # llama.cpp drops a prompt file's last newline: the text is then exact
            base = float(
                EVAL_RE.search(
                    run(
                        [
                            str(a.native / "llama-completion"),
                            "-m",
                            str(a.target),
                            "-f",
                            str(f),
                            "-no-cnv",
                            *common,
                        ]
                    )
                ).group(1)
            )  # type: ignore[union-attr]
            lookup = [str(a.native / "llama-lookup"), "-m", str(a.target), "-f", str(f), *common]
            own = float(DECODED_RE.search(run(lookup)).group(1))  # type: ignore[union-attr]
            run([*lookup, "-lcd", str(cache)])
            again = float(DECODED_RE.search(run([*lookup, "-lcd", str(cache)])).group(1))  # type: ignore[union-attr]
            plain.append(own / base)
            dynamic.append(again / base)
            print(
                f"{category:14} target {base:6.1f}  lookup {own:6.1f}  lookup-dynamic (second run) "
                f"{again:6.1f} tok/s",
                flush=True,
            )
    print(
        f"median: lookup/target {statistics.median(plain):.2f}x, lookup-dynamic second run/target "
        f"{statistics.median(dynamic):.2f}x,"
        f" dynamic/plain {statistics.median(d / p for d, p in zip(dynamic, plain, strict=False)):.2f}x"
    )


if __name__ == "__main__":
    main()
