#!/usr/bin/env python3
"""Native llama.cpp speculative decoding on the same prompts, for the side-by-side in RESULTS.md.

Needs the native tools built from the llama.cpp copy inside the llama-cpp-python sdist:
    bash ../shared/bench/build_native.sh /tmp/native
Usage: python benchmarks/native_compare.py TARGET.gguf DRAFT.gguf --native /tmp/native
           --prompts FILE.jsonl [--category C ...] [--limit N] [-n TOKENS] [--draft-max 2,4,8,16]
For every prompt (rendered with the model's chat template, exactly as localspec sends it): native
target-alone tokens/sec (llama-completion), then llama-speculative-simple at each fixed draft max.
Prints per category the median speedup of each draft max and the best of them."""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

from localspec.backend.hardware import physical_cores
from localspec.backend.model import Model, ModelOptions
from localspec.bench.runs import load_prompts
from localspec.session.prompt import render_chat

EVAL_RE = re.compile(
    r"(?<!prompt )eval time =\s*[\d.]+ ms /\s*\d+ (?:runs|tokens).*?([\d.]+) tokens per second"
)
DECODED_RE = re.compile(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s")
ACCEPT_RE = re.compile(r"accept\s+=\s+([\d.]+)%")


def run(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, encoding="utf-8", errors="replace", timeout=900)
    return res.stdout + res.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path)
    ap.add_argument("draft", type=Path)
    ap.add_argument("--native", type=Path, required=True)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--category", action="append", default=[])
    ap.add_argument("--limit", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--draft-max", default="2,4,8,16")
    a = ap.parse_args()
    t = str(physical_cores())
    common = ["-n", str(a.n), "--temp", "0", "-t", t, "-tb", t, "-c", "4096", "-ngl", "0"]
    sizes = [int(x) for x in a.draft_max.split(",")]
    with Model(a.target, ModelOptions(n_ctx=4096)) as m:
        rendered = {
            p.id: (p.category, render_chat(m, [{"role": "user", "content": p.text}]))
            for p in load_prompts(a.prompts, a.category, a.limit)
        }
    speedups: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp:
        for pid, (category, text) in rendered.items():
            f = Path(tmp) / f"{pid}.txt"
            f.write_text(text + "\n")  # llama.cpp drops a prompt file's last newline: the text is then exact
            out = run(
                [str(a.native / "llama-completion"), "-m", str(a.target), "-f", str(f), "-no-cnv", *common]
            )
            m_base = EVAL_RE.search(out)
            if not m_base:
                raise SystemExit(f"could not read llama-completion's speed:\n{out[-2000:]}")
            base = float(m_base.group(1))
            line = [f"{category:12s} {pid:>4s} native base {base:6.2f} tok/s"]
            for k in sizes:
                out = run(
                    [
                        str(a.native / "llama-speculative-simple"),
                        "-m",
                        str(a.target),
                        "-md",
                        str(a.draft),
                        "-f",
                        str(f),
                        "--spec-type",
                        "draft-simple",
                        "--spec-draft-n-max",
                        str(k),
                        "--spec-draft-n-min",
                        "0",
                        "-td",
                        t,
                        "-tbd",
                        t,
                        "-ngld",
                        "0",
                        *common,
                    ]
                )
                m_spec, m_acc = DECODED_RE.search(out), ACCEPT_RE.search(out)
                if not m_spec:
                    raise SystemExit(f"could not read llama-speculative-simple's speed:\n{out[-2000:]}")
                spec = float(m_spec.group(1))
                speedups[category][k].append(spec / base)
                line.append(
                    f"k={k}: {spec:6.2f} ({spec / base:.2f}x, accept {m_acc.group(1) if m_acc else '?'}%)"
                )
            print(" | ".join(line), flush=True)
    print("\ncategory      " + "  ".join(f"k={k:<5d}" for k in sizes) + "  best")
    for category, by_k in speedups.items():
        meds = {k: statistics.median(v) for k, v in by_k.items()}
        print(
            f"{category:12s}  "
            + "  ".join(f"{meds[k]:6.2f}x" for k in sizes)
            + f"  {max(meds.values()):.2f}x (k={max(meds, key=meds.get)})"
        )
    all_meds = {k: statistics.median([x for by_k in speedups.values() for x in by_k[k]]) for k in sizes}
    print(
        f"{'all':12s}  "
        + "  ".join(f"{all_meds[k]:6.2f}x" for k in sizes)
        + f"  {max(all_meds.values()):.2f}x"
    )


if __name__ == "__main__":
    main()
