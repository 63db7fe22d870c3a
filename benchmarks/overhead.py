#!/usr/bin/env python3
"""What localspec costs beside llama.cpp, per vocabulary width, and the target alone against native
llama.cpp and llama-cpp-python, in one interleaved pass.

    python benchmarks/overhead.py testbed --native /tmp/native --prompts ../shared/bench/specbench-dev.jsonl
        [--count 3] [-n 128] [--repeat 2] [--widths 49k,152k,262k] [--target target-f16.gguf]
        [--gpu-layers N --argmax device,host]

Widths come from benchmarks/wide_vocab.py (testbed/v152k, testbed/v262k). Per width and mode (target
alone greedy and temp 0.8; the draft model fixed at 8 tokens, greedy and temp 0.8, and auto; prompt
lookup), every generation's wall time is split into what llama_decode took (target and draft) and
the rest: the engine's own work, reported per step, per drafted token and per verified position,
beside the mean pass times (Model.busy_s: on a CPU a pass is done when its llama_decode returns).
The target alone's tokens/s stands beside llama-bench's (`-n N -p 0 -d D`, same threads, D the
prompts' median length) and llama-cpp-python's `create_completion` (whose sampling runs in C) on the
same model, run in the same minutes. Load: `localspec run`'s load_s against `Llama()`'s in a fresh
process each, the same file, in alternating order (medians of 3). Beside each greedy row on the host
stands its floor: what reading the rows costs right after their pass with no engine at all (a draft
row's argmax per drafted token, a verification's rows), on a CPU paid cold, since every pass streams
the weights through the caches. With --gpu-layers (every side offloads as many), each mode runs with
greedy argmaxes taken on the device (backend/top_tokens.py) and on the host, interleaved, each a
model pair of its own."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from localspec.backend.hardware import physical_cores  # noqa: E402
from localspec.backend.model import Model, ModelOptions  # noqa: E402
from localspec.bench.runs import load_prompts  # noqa: E402
from localspec.drafters.base import DraftSettings  # noqa: E402
from localspec.drafters.draft_model import DraftModelDrafter  # noqa: E402
from localspec.drafters.ngram import NgramDrafter  # noqa: E402
from localspec.engine.events import PromptEvent, drain  # noqa: E402
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine  # noqa: E402
from localspec.sampling.dist import SamplingParams  # noqa: E402
from localspec.session.prompt import prompt_tokens  # noqa: E402

GREEDY = SamplingParams(temperature=0.0)
WARM = SamplingParams(temperature=0.8)
MODES = {  # name: (drafter, sampling, draft mode)
    "alone-greedy": ("none", GREEDY, "off"),
    "alone-temp0.8": ("none", WARM, "off"),
    "draft8-greedy": ("draft", GREEDY, "fixed"),
    "draft8-temp0.8": ("draft", WARM, "fixed"),
    "draft-auto-greedy": ("draft", GREEDY, "auto"),
    "lookup-greedy": ("ngram", GREEDY, "auto"),
}
FOLDERS = {"49k": ".", "152k": "v152k", "262k": "v262k"}


def llama_bench(
    native: Path, model: Path, n: int, threads: int, depth: int = 0, repeats: int = 2, gpu_layers: int = 0
) -> float:
    """Native llama.cpp's decode tokens/s (llama-bench's tg test) after `depth` tokens of context:
    a pass attends to what is cached, so a decode from an empty context is faster than one after a
    prompt (at 262k here, 35 tok/s at depth 0 against 29.5 at depth 300)."""
    out = subprocess.run(
        [
            str(native / "llama-bench"),
            "-m",
            str(model),
            "-n",
            str(n),
            "-p",
            "0",
            "-d",
            str(depth),
            "-t",
            str(threads),
            "-r",
            str(repeats),
            "-ngl",
            str(gpu_layers),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    ).stdout
    return float(json.loads(out)[0]["avg_ts"])


def llama_cpp_python(
    model: Path,
    tokens: list[int],
    n: int,
    threads: int,
    params: SamplingParams,
    seed: int,
    gpu_layers: int = 0,
) -> float:
    from llama_cpp import Llama

    llm = Llama(
        str(model),
        n_ctx=4096,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
        seed=seed,
        n_gpu_layers=gpu_layers,
    )
    try:
        first, count = None, 0
        kwargs = dict(
            temperature=params.temperature,
            top_k=params.top_k if params.temperature > 0 else 1,
            top_p=params.top_p,
            min_p=params.min_p,
            repeat_penalty=1.0,
            seed=seed,
        )
        for _ in llm.create_completion(tokens, max_tokens=n, stream=True, **kwargs):
            count += 1
            if first is None:
                first = time.perf_counter()  # the first token comes after the prompt's evaluation
        end = time.perf_counter()
        return (count - 1) / (end - first) if first and count > 1 else 0.0
    finally:
        llm.close()


def load_times(target: Path, repeat: int = 3, gpu_layers: int = 0) -> tuple[float, float]:
    """Medians of (localspec run's load_s, Llama()'s), each in a process of its own, in alternating
    order after one read of the file (whichever ran first would otherwise pay the disk)."""
    with target.open("rb") as f:
        while f.read(1 << 24):
            pass
    ours, theirs = [], []
    for i in range(repeat):
        for first in (_ours, _theirs) if i % 2 == 0 else (_theirs, _ours):
            (ours if first is _ours else theirs).append(first(target, gpu_layers))
    return statistics.median(ours), statistics.median(theirs)


def _ours(target: Path, gpu_layers: int) -> float:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "localspec",
            "run",
            "-m",
            str(target),
            "-d",
            "none",
            "--no-lookup",
            "-p",
            "hi",
            "-n",
            "1",
            "--temp",
            "0",
            "--json",
            "-ngl",
            str(gpu_layers),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return json.loads(run.stdout)["stats"]["load_s"]


def _theirs(target: Path, gpu_layers: int) -> float:
    code = (
        "import time, sys; from llama_cpp import Llama; t = time.perf_counter(); "
        f"Llama({str(target)!r}, n_ctx=4096, verbose=False, n_gpu_layers={gpu_layers}); "
        "print(time.perf_counter() - t)"
    )
    return float(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=True
        ).stdout
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("testbed", type=Path)
    ap.add_argument("--native", type=Path, required=True)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--widths", default="49k,152k,262k")
    ap.add_argument("--target", default="target-f16.gguf")
    ap.add_argument("--draft", default="draft-q4_1.gguf")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded, every side alike (99: all)")
    ap.add_argument(
        "--argmax",
        default="device",
        help="where greedy argmaxes are taken, comma-separated: device (where "
        "the output layer is offloaded, else the host), host",
    )
    ap.add_argument(
        "--engine-only",
        action="store_true",
        help="the engine's rows alone: no loads, llama-bench or create_completion",
    )
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    threads = physical_cores()
    prompts = [p for p in load_prompts(a.prompts, [], 1)][: a.count]
    rows: list[dict] = []
    peers = () if a.engine_only else ((GREEDY, "greedy"), (WARM, "temp0.8"))  # create_completion's samplings
    for width in a.widths.split(","):
        folder = a.testbed / FOLDERS[width]
        target_path, draft_path = folder / a.target, folder / a.draft
        if not a.engine_only:
            ours_load, theirs_load = load_times(target_path, gpu_layers=a.gpu_layers)
            rows.append({"width": width, "kind": "load", "ours": ours_load, "llama_cpp_python": theirs_load})
            print(f"{width} load: localspec {ours_load:.2f}s, Llama() {theirs_load:.2f}s", flush=True)
        pairs = {}
        for place in a.argmax.split(",") if a.gpu_layers else ["host"]:  # with no layers offloaded, no device
            opts = ModelOptions(
                n_ctx=4096,
                n_threads=threads,
                n_threads_batch=threads,
                n_gpu_layers=a.gpu_layers,
                device_argmax=place == "device",
            )
            pairs[place] = (Model(target_path, opts), Model(draft_path, opts))
        target = next(iter(pairs.values()))[0]
        # Native decodes after as many tokens as the median prompt here holds.
        depth = int(statistics.median(len(prompt_tokens(target, p.text, raw=False)) for p in prompts))
        for r in range(a.repeat):
            if not a.engine_only:
                native = llama_bench(a.native, target_path, a.n, threads, depth, gpu_layers=a.gpu_layers)
                rows.append({"width": width, "kind": "native", "repeat": r, "tokens_per_second": native})
            for p in prompts:
                tokens = prompt_tokens(target, p.text, raw=False)
                for params, label in peers:
                    tps = llama_cpp_python(
                        target_path, tokens, a.n, threads, params, seed=r, gpu_layers=a.gpu_layers
                    )
                    rows.append(
                        {
                            "width": width,
                            "kind": "llama-cpp-python",
                            "sampling": label,
                            "prompt": p.id,
                            "repeat": r,
                            "tokens_per_second": tps,
                        }
                    )
                if "host" in pairs:
                    rows.append(
                        {**_floor_row(*pairs["host"], tokens), "width": width, "prompt": p.id, "repeat": r}
                    )
                for mode in a.modes.split(","):
                    for place, (target, draft) in pairs.items():
                        row = _engine_row(target, draft, mode, tokens, a.n, r)
                        row.update(width=width, prompt=p.id, repeat=r, argmax=place)
                        rows.append(row)
                        print(
                            f"{width} {mode} ({place} argmax) {p.id} #{r + 1}: "
                            f"{row['tokens_per_second']:.1f} tok/s, outside "
                            f"{row['outside_ms_per_step']:.3f} ms/step ({row['drafted_per_step']:.1f} "
                            "drafted/step), target pass "
                            f"{row['target_pass_ms']:.2f} ms",
                            flush=True,
                        )
        for target, draft in pairs.values():
            target.close()
            draft.close()
    report(rows, a.modes.split(","))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


def _engine_row(target: Model, draft: Model, mode: str, tokens: list[int], n: int, seed: int) -> dict:
    """One generation in `mode`: its speed and its time outside llama_decode (target and draft)."""
    kind, params, draft_mode = MODES[mode]
    drafter = {"none": None, "draft": DraftModelDrafter(draft, target.n_vocab), "ngram": NgramDrafter()}[kind]
    engine = SpeculativeEngine(target, drafter, kind)
    config = GenerationConfig(
        max_tokens=n, sampling=params, seed=seed, draft_max=8, draft_mode=draft_mode, drafting=DraftSettings()
    )
    target.truncate(0)
    draft.truncate(0)
    marks: list[tuple[float, int, float, int]] = []

    def phase(ev: object) -> None:
        if isinstance(ev, PromptEvent):  # what follows is the generation's
            marks.append((target.busy_s, target.passes, draft.busy_s, draft.passes))

    s = drain(engine.generate(tokens, config), phase).stats
    t0, n0, d0, m0 = marks[0]
    target_s, target_n = target.busy_s - t0, target.passes - n0
    draft_s, draft_n = draft.busy_s - d0, draft.passes - m0
    outside = s.elapsed_s - target_s - draft_s
    verified = s.n_steps + s.n_drafted
    return {
        "kind": "engine",
        "mode": mode,
        "tokens_per_second": s.tokens_per_second,
        "steps": s.n_steps,
        "drafted": s.n_drafted,
        "accepted": s.n_accepted,
        "outside_ms_per_step": 1e3 * outside / max(s.n_steps, 1),
        "outside_ms_per_verified": 1e3 * outside / max(verified, 1),
        "target_pass_ms": 1e3 * target_s / max(target_n, 1),
        "draft_pass_ms": 1e3 * draft_s / max(draft_n, 1) if draft_n > 0 else 0.0,
        "drafted_per_step": s.n_drafted / max(s.n_steps, 1),
    }


def _floor_row(target: Model, draft: Model, tokens: list[int], passes: int = 32) -> dict:
    """What the host pays to read rows right after their pass, before any engine: the argmax of a
    draft pass's row, and of a nine-row verification's. On a CPU a pass streams the weights through
    the caches, so these read cold (several times their cost in a loop over one row)."""
    draft.truncate(0)
    target.truncate(0)
    draft.prefill(tokens)
    target.prefill(tokens)
    one, nine, token = [], [], tokens[-1]
    for _ in range(passes):
        row = draft.decode([token], all_logits=False)[0]  # type: ignore[index]
        start = time.perf_counter()
        token = int(row.argmax())
        one.append(time.perf_counter() - start)
    for _ in range(passes // 4):
        rows = target.decode([token] * 9, all_logits=True)
        start = time.perf_counter()
        rows.argmax(axis=1)  # type: ignore[union-attr]
        nine.append(time.perf_counter() - start)
        target.truncate(len(tokens))
    return {
        "kind": "floor",
        "draft_row_ms": 1e3 * statistics.median(one),
        "verify_rows_ms": 1e3 * statistics.median(nine),
    }


def _median(rows: list[dict], key: str, **match: object) -> float:
    values = [x[key] for x in rows if all(x.get(k) == v for k, v in match.items())]
    return statistics.median(values) if values else float("nan")


def report(rows: list[dict], modes: list[str]) -> None:
    widths = list(dict.fromkeys(x["width"] for x in rows))
    places = list(dict.fromkeys(x["argmax"] for x in rows if x["kind"] == "engine"))
    print(
        "\n| width | mode | argmax | tok/s | engine outside llama.cpp, ms/step | ms/verified position | "
        "drafted/step | bar, ms/step | "
        "floor: the rows' argmaxes alone, ms/step | target pass, ms | draft pass, ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for w in widths:
        for mode in modes:
            for place in places:
                at = dict(width=w, mode=mode, argmax=place)
                step, per_pos = (
                    _median(rows, "outside_ms_per_step", **at),
                    _median(rows, "outside_ms_per_verified", **at),
                )
                drafted = _median(rows, "drafted_per_step", **at)
                greedy = MODES[mode][1].greedy
                bar = f"<= {0.5 + 0.05 * drafted:.2f}" if greedy else f"<= 1.00 per position ({per_pos:.3f})"
                floor = "-"
                if (
                    greedy and place == "host"
                ):  # a drafted token reads a draft row; a step verifies up to nine rows
                    one, nine = (
                        _median(rows, "draft_row_ms", width=w, kind="floor"),
                        _median(rows, "verify_rows_ms", width=w, kind="floor"),
                    )
                    floor = f"{drafted * one + nine * (drafted + 1) / 9:.3f}"
                print(
                    f"| {w} | {mode} | {place} | {_median(rows, 'tokens_per_second', **at):.1f} | "
                    f"{step:.3f} | {per_pos:.3f} | {drafted:.1f} | "
                    f"{bar} | {floor} | {_median(rows, 'target_pass_ms', **at):.2f} | "
                    f"{_median(rows, 'draft_pass_ms', **at):.2f} |"
                )
    print(
        f"\n| width | target alone greedy ({places[0]} argmax), tok/s | llama-bench | ratio (bar 0.97) | "
        "create_completion greedy | ratio (bar 0.95) | "
        "target alone temp 0.8 | create_completion temp 0.8 | ratio (bar 0.90) | load localspec, s | load "
        "Llama(), s | bar: 1.5x + 1 s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for w in widths:
        ours_g = _median(rows, "tokens_per_second", width=w, mode="alone-greedy", argmax=places[0])
        ours_w = _median(rows, "tokens_per_second", width=w, mode="alone-temp0.8", argmax=places[0])
        native = _median(rows, "tokens_per_second", width=w, kind="native")
        lcp_g = _median(rows, "tokens_per_second", width=w, kind="llama-cpp-python", sampling="greedy")
        lcp_w = _median(rows, "tokens_per_second", width=w, kind="llama-cpp-python", sampling="temp0.8")
        load_o, load_t = (
            _median(rows, "ours", width=w, kind="load"),
            _median(rows, "llama_cpp_python", width=w, kind="load"),
        )
        print(
            f"| {w} | {ours_g:.1f} | {native:.1f} | {ours_g / native:.3f} | {lcp_g:.1f} | "
            f"{ours_g / lcp_g:.3f} | {ours_w:.1f} | {lcp_w:.1f} | "
            f"{ours_w / lcp_w:.3f} | {load_o:.2f} | {load_t:.2f} | {1.5 * load_t + 1:.2f} |"
        )
    by_width = defaultdict(list)
    for x in rows:
        if x["kind"] == "native":
            by_width[x["width"]].append(round(x["tokens_per_second"], 1))
    print(f"\nllama-bench runs: {dict(by_width)}")


if __name__ == "__main__":
    main()
