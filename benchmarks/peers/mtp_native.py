"""Drafting with the target's own MTP heads: localspec (the target alone, auto, fixed head lengths)
against native llama.cpp's draft-mtp on the same prompts, interleaved per prompt.

    python -m benchmarks.testbeds.make_mtp_testbed testbed
    bash ../shared/bench/build_native.sh /work/native
    python -m benchmarks.peers.mtp_native testbed/mtp-heavy.gguf --native /work/native --prompts $P -n 128

Per prompt (rendered with the model's chat template, as localspec sends it): localspec's target
alone, `auto` (run's default for a target with heads) and each fixed length, in this process on one
loaded model, greedy; then native llama-completion (the target alone) and llama-speculative-simple
--spec-type draft-mtp at each fixed length, same threads, each a process of its own (their decode
speed as they print it). Prints per category the medians of per-prompt ratios."""

from __future__ import annotations

import argparse
import re
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks.harness import models, native, options
from benchmarks.harness.summary import median, table
from localspec.backend.hardware import physical_cores
from localspec.bench.runs import load_prompts
from localspec.bench.ties import compare_greedy
from localspec.drafters.mtp import MtpDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.session.prompt import tokenize_rendered

ENCODED_RE = re.compile(r"encoded\s+(\d+) tokens")


def native_rate(a: argparse.Namespace, prompt_file: Path, k: int | None, n_prompt: int) -> float:
    """Native llama.cpp's tokens/s: the target alone (k None), or draft-mtp at k tokens a step,
    refused where it read another prompt than localspec's."""
    if k is None:
        return native.completion(a.native, a.target, prompt_file, a.n, a.threads)
    speed, out = native.speculative(
        a.native, a.target, prompt_file, a.n, k, "--spec-type", "draft-mtp", threads=a.threads
    )
    encoded = ENCODED_RE.search(out)
    if encoded and int(encoded.group(1)) != n_prompt:
        raise SystemExit(
            f"native llama.cpp read {encoded.group(1)} prompt tokens, localspec {n_prompt}: "
            "not the same prompt"
        )
    return speed


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_native(ap)
    options.add_prompts(ap)
    options.add_generation(ap, temp=False)
    ap.add_argument("--lengths", type=options.csv(int), default="2,4,8")
    ap.add_argument("--threads", type=int, default=physical_cores())
    a = options.parse(ap)
    lengths = a.lengths
    modes = ["alone", "auto", *(f"fixed-{k}" for k in lengths)]
    # Category -> mode -> per prompt
    tps: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    same = differ = 0
    with models.load(a.target, threads=a.threads, mtp=True) as target, tempfile.TemporaryDirectory() as tmp:
        assert target.head is not None
        engines = {"alone": SpeculativeEngine(target, None)}
        engines.update({m: SpeculativeEngine(target, MtpDrafter(target.head), "mtp") for m in modes[1:]})
        for p in load_prompts(a.prompts, a.category, a.limit):
            text = models.chat_text(target, p.text)
            tokens = tokenize_rendered(target, text)
            f = native.prompt_file(Path(tmp), p.id, text)
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
                tps[p.category][name].append(native_rate(a, f, k, len(tokens)))
                line.append(f"{name} {tps[p.category][name][-1]:5.1f}")
            print(" | ".join(line), flush=True)
    report(tps, lengths, same, differ)


def report(tps: dict[str, dict[str, list[float]]], lengths: list[int], same: int, differ: int) -> None:
    """Per category and overall: medians of per-prompt ratios, against the fixed length (of
    localspec's, of native's) whose median speedup over its own target alone is the best there."""

    def ratio(rows: dict[str, list[float]], num: str, den: str) -> float:
        return median(a / b for a, b in zip(rows[num], rows[den], strict=True))

    everything: dict[str, list[float]] = defaultdict(list)
    cells = []
    for category, rows in [*tps.items(), ("all", everything)]:
        if category != "all":
            for mode, values in rows.items():
                everything[mode].extend(values)
        ours = max((f"fixed-{k}" for k in lengths), key=lambda m: ratio(rows, m, "alone"))
        theirs = max((f"native-{k}" for k in lengths), key=lambda m: ratio(rows, m, "native-alone"))
        cells.append(
            [
                category,
                f"{median(rows['alone']):.1f}",
                f"{ratio(rows, 'auto', 'alone'):.2f}x",
                f"{ratio(rows, ours, 'alone'):.2f}x ({ours})",
                f"{ratio(rows, 'auto', ours):.2f}x",
                f"{ratio(rows, theirs, 'native-alone'):.2f}x ({theirs})",
                f"{ratio(rows, 'auto', theirs):.2f}x",
            ]
        )
    headers = ["category", "alone tok/s", "auto / alone", "best fixed / alone", "auto / best fixed"]
    print("\n" + table([*headers, "native best / native alone", "auto / native best"], cells))
    print(f"\nsame tokens as the target alone (ties allowed): {same} of {same + differ} generations")


if __name__ == "__main__":
    main()
