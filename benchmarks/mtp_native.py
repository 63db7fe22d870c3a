#!/usr/bin/env python3
"""Drafting with the target's own MTP heads: localspec (the target alone, auto, fixed head lengths)
against native llama.cpp's draft-mtp on the same prompts, interleaved per prompt.

    python benchmarks/make_mtp_testbed.py testbed
    bash ../shared/bench/build_native.sh /work/native
    python benchmarks/mtp_native.py testbed/mtp-heavy.gguf --native /work/native --prompts $P --limit 1 -n 128

Per prompt (rendered with the model's chat template, as localspec sends it): localspec's target
alone, `auto` (run's default for a target with heads) and each fixed length, in this process on one
loaded model, greedy; then native llama-completion (the target alone) and llama-speculative-simple
--spec-type draft-mtp at each fixed length, same threads, each a process of its own (their decode
speed as they print it). Prints per category the medians of per-prompt ratios."""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from native_compare import DECODED_RE, EVAL_RE, run  # noqa: E402

from localspec.backend.hardware import physical_cores  # noqa: E402
from localspec.backend.model import Model, ModelOptions  # noqa: E402
from localspec.bench.runs import load_prompts  # noqa: E402
from localspec.bench.ties import compare_greedy  # noqa: E402
from localspec.drafters.mtp import MtpDrafter  # noqa: E402
from localspec.engine.events import drain  # noqa: E402
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine  # noqa: E402
from localspec.sampling.dist import SamplingParams  # noqa: E402
from localspec.session.prompt import render_chat, tokenize_rendered  # noqa: E402

ENCODED_RE = re.compile(r"encoded\s+(\d+) tokens")


def native(a: argparse.Namespace, prompt_file: Path, k: int | None, n_prompt: int) -> float:
    t = str(a.threads)
    common = [
        "-f",
        str(prompt_file),
        "-n",
        str(a.n),
        "--temp",
        "0",
        "-t",
        t,
        "-tb",
        t,
        "-c",
        "4096",
        "-ngl",
        "0",
    ]
    if k is None:
        out = run([str(a.native / "llama-completion"), "-m", str(a.model), "-no-cnv", *common])
        found = EVAL_RE.search(out)
    else:
        out = run(
            [
                str(a.native / "llama-speculative-simple"),
                "-m",
                str(a.model),
                "--spec-type",
                "draft-mtp",
                "--spec-draft-n-max",
                str(k),
                "--spec-draft-n-min",
                "0",
                *common,
            ]
        )
        found = DECODED_RE.search(out)
        encoded = ENCODED_RE.search(out)
        if encoded and int(encoded.group(1)) != n_prompt:
            raise SystemExit(
                f"native llama.cpp read {encoded.group(1)} prompt tokens, localspec {n_prompt}: not the "
                "same prompt"
            )
    if not found:
        raise SystemExit(f"could not read the native speed:\n{out[-2000:]}")
    return float(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--native", type=Path, required=True)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--category", action="append", default=[])
    ap.add_argument("--limit", type=int, default=1)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--lengths", default="2,4,8")
    ap.add_argument("--threads", type=int, default=physical_cores())
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    modes = ["alone", "auto", *(f"fixed-{k}" for k in lengths)]
    opts = ModelOptions(n_ctx=4096, n_threads=a.threads, n_threads_batch=a.threads, mtp=True)
    # Category -> mode -> per prompt
    tps: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    same = differ = 0
    with Model(a.model, opts) as target, tempfile.TemporaryDirectory() as tmp:
        assert target.head is not None
        engines = {"alone": SpeculativeEngine(target, None)}
        engines.update({m: SpeculativeEngine(target, MtpDrafter(target.head), "mtp") for m in modes[1:]})
        for p in load_prompts(a.prompts, a.category, a.limit):
            text = render_chat(target, [{"role": "user", "content": p.text}])
            tokens = tokenize_rendered(target, text)
            f = Path(tmp) / f"{p.id}.txt"
            f.write_text(text + "\n")  # llama.cpp drops a prompt file's last newline: the text is then exact
            line, reference = [f"{p.category:14s} {p.id:>4s}"], None
            for mode in modes:
                length = mode.removeprefix("fixed-")
                config = GenerationConfig(
                    max_tokens=a.n,
                    sampling=SamplingParams(temperature=0.0),
                    draft_mode="fixed" if length.isdigit() else "auto",
                    draft_max=int(length) if length.isdigit() else 16,
                )
                done = drain(engines[mode].generate(tokens, config))
                tps[p.category][mode].append(done.stats.tokens_per_second)
                if reference is None:
                    reference = done.tokens
                else:
                    div = compare_greedy(target, tokens, reference, done.tokens)
                    same, differ = (same + 1, differ) if div is None or div.is_tie else (same, differ + 1)
                line.append(f"{mode} {done.stats.tokens_per_second:5.1f}")
            for k in [None, *lengths]:
                name = "native-alone" if k is None else f"native-{k}"
                tps[p.category][name].append(native(a, f, k, len(tokens)))
                line.append(f"{name} {tps[p.category][name][-1]:5.1f}")
            print(" | ".join(line), flush=True)
    report(tps, lengths, same, differ)


def report(tps: dict[str, dict[str, list[float]]], lengths: list[int], same: int, differ: int) -> None:
    """Per category and overall: medians of per-prompt ratios, against the fixed length (of
    localspec's, of native's) whose median speedup over its own target alone is the best there."""
    med = statistics.median

    def ratio(rows: dict[str, list[float]], num: str, den: str) -> float:
        return med([a / b for a, b in zip(rows[num], rows[den], strict=False)])

    print(
        "\n| category | alone tok/s | auto / alone | best fixed / alone | auto / best fixed | native best "
        "/ native alone | auto / native best |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    everything: dict[str, list[float]] = defaultdict(list)
    for category, rows in [*tps.items(), ("all", everything)]:
        if category != "all":
            for mode, values in rows.items():
                everything[mode].extend(values)
        ours = max((f"fixed-{k}" for k in lengths), key=lambda m: ratio(rows, m, "alone"))
        theirs = max((f"native-{k}" for k in lengths), key=lambda m: ratio(rows, m, "native-alone"))
        print(
            f"| {category} | {med(rows['alone']):.1f} | {ratio(rows, 'auto', 'alone'):.2f}x | "
            f"{ratio(rows, ours, 'alone'):.2f}x ({ours}) | {ratio(rows, 'auto', ours):.2f}x | "
            f"{ratio(rows, theirs, 'native-alone'):.2f}x ({theirs}) | {ratio(rows, 'auto', theirs):.2f}x |"
        )
    print(f"\nsame tokens as the target alone (ties allowed): {same} of {same + differ} generations")


if __name__ == "__main__":
    main()
