"""What localspec costs beside llama.cpp, per vocabulary width, and the target alone against native
llama.cpp and llama-cpp-python, in one interleaved pass.

    python -m benchmarks.costs.overhead testbed --native /tmp/native
        --prompts ../shared/bench/specbench-dev.jsonl [--count 3] [-n 128] [--repeat 2]
        [--widths 49k,152k,262k] [--target target-f16.gguf] [--gpu-layers N --argmax device,host]

Widths come from benchmarks/testbeds/wide_vocab.py (testbed/v152k, testbed/v262k). Per width and
mode (target alone greedy and temp 0.8; the draft model fixed at 8 tokens, greedy and temp 0.8, and
auto; prompt lookup), every generation's wall time is split into what llama_decode took (target and
draft) and the rest: the engine's own work, reported per step, per drafted token and per verified
position, beside the mean pass times (Model.busy_s: on a CPU a pass is done when its llama_decode
returns). The target alone's tokens/s stands beside llama-bench's (`-n N -p 0 -d D`, same threads,
D the prompts' median length) and llama-cpp-python's `create_completion` (whose sampling runs in C)
on the same model, run in the same minutes. Load: `localspec run`'s load_s against `Llama()`'s in a
fresh process each, the same file, in alternating order (medians of 3). Beside each greedy row on
the host stands its floor: what reading the rows costs right after their pass with no engine at all
(a draft row's argmax per drafted token, a verification's rows), on a CPU paid cold, since every
pass streams the weights through the caches. With --gpu-layers (every side offloads as many), each
mode runs with greedy argmaxes taken on the device (backend/top_tokens.py) and on the host,
interleaved, each a model pair of its own."""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from benchmarks.costs.engine_rows import GREEDY, MODES, WARM, engine_row, floor_row
from benchmarks.costs.overhead_report import report
from benchmarks.costs.peer_rates import llama_cpp_python, load_times
from benchmarks.harness import models, options
from benchmarks.harness.native import llama_bench
from benchmarks.harness.summary import median, save
from localspec.backend.hardware import physical_cores
from localspec.backend.model import Model
from localspec.bench.runs import load_prompts
from localspec.session.prompt import prompt_tokens

FOLDERS = {"49k": ".", "152k": "v152k", "262k": "v262k"}


def main() -> None:
    ap = options.parser(__doc__)
    options.add_testbed(ap)
    options.add_native(ap)
    ap.add_argument("--prompts", type=Path, required=True, help="a Spec-Bench JSONL file")
    ap.add_argument("--count", type=int, default=3)
    options.add_generation(ap, temp=False)
    options.add_repeat(ap, 2)
    ap.add_argument("--widths", type=options.csv(str), default="49k,152k,262k")
    ap.add_argument("--target", default="target-f16.gguf")
    ap.add_argument("--draft", default="draft-q4_1.gguf")
    ap.add_argument("--modes", type=options.csv(str), default=",".join(MODES))
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
    options.add_json(ap)
    a = options.parse(ap)
    prompts = [p for p in load_prompts(a.prompts, [], 1)][: a.count]
    rows: list[dict] = []
    for width in a.widths:
        if not a.engine_only:
            ours_load, theirs_load = load_times(
                a.testbed / FOLDERS[width] / a.target, gpu_layers=a.gpu_layers
            )
            rows.append({"width": width, "kind": "load", "ours": ours_load, "llama_cpp_python": theirs_load})
            print(f"{width} load: localspec {ours_load:.2f}s, Llama() {theirs_load:.2f}s", flush=True)
        rows += measure_width(a, width, prompts)
    report(rows, a.modes)
    save(a.json, rows)


def model_pairs(a: argparse.Namespace, folder: Path) -> dict[str, tuple[Model, Model]]:
    """Target and draft per place greedy argmaxes are taken (with no layers offloaded, the host)."""
    pairs = {}
    for place in a.argmax.split(",") if a.gpu_layers else ["host"]:
        extra = {"n_gpu_layers": a.gpu_layers, "device_argmax": place == "device"}
        pairs[place] = (models.load(folder / a.target, **extra), models.load(folder / a.draft, **extra))
    return pairs


def measure_width(a: argparse.Namespace, width: str, prompts: list) -> list[dict]:
    """The rows of one vocabulary width: llama-bench, create_completion, the floors and every mode."""
    threads, rows = physical_cores(), []
    target_path = a.testbed / FOLDERS[width] / a.target
    peers = () if a.engine_only else ((GREEDY, "greedy"), (WARM, "temp0.8"))  # create_completion's samplings
    pairs = model_pairs(a, target_path.parent)
    target = next(iter(pairs.values()))[0]
    # Native decodes after as many tokens as the median prompt here holds.
    depth = int(median(len(prompt_tokens(target, p.text, raw=False)) for p in prompts))
    for r in range(a.repeat):
        if not a.engine_only:
            native = llama_bench(a.native, target_path, a.n, threads, depth, gpu_layers=a.gpu_layers)
            rows.append({"width": width, "kind": "native", "repeat": r, "tokens_per_second": native})
        for p in prompts:
            at = {"width": width, "prompt": p.id, "repeat": r}
            tokens = prompt_tokens(target, p.text, raw=False)
            for params, label in peers:
                tps = llama_cpp_python(
                    target_path, tokens, a.n, threads, params, seed=r, gpu_layers=a.gpu_layers
                )
                rows.append({**at, "kind": "llama-cpp-python", "sampling": label, "tokens_per_second": tps})
            if "host" in pairs:
                rows.append({**floor_row(*pairs["host"], tokens), **at})
            for mode, (place, (target, draft)) in itertools.product(a.modes, pairs.items()):
                row = {**engine_row(target, draft, mode, tokens, a.n, r), **at, "argmax": place}
                rows.append(row)
                print(
                    f"{width} {mode} ({place} argmax) {p.id} #{r + 1}: {row['tokens_per_second']:.1f} tok/s, "
                    f"outside {row['outside_ms_per_step']:.3f} ms/step ({row['drafted_per_step']:.1f} "
                    f"drafted/step), target pass {row['target_pass_ms']:.2f} ms",
                    flush=True,
                )
    for target, draft in pairs.values():
        target.close()
        draft.close()
    return rows


if __name__ == "__main__":
    main()
