"""Drafting from the user's files (REST): a datastore of a folder against the target alone and
against today's default (n-gram prompt lookup) and suffix lookup without it, on prompts that ask for
the folder's code and on prompts unrelated to it; and a lookup's latency in a datastore of a million
tokens.

    python -m benchmarks.drafters.datastore TARGET.gguf [--folder localspec] [--prompts FILE.jsonl]
        [--count 8] [--unrelated 6] [--repeat 2] [-n 128] [--json OUT.json]

Every mode runs on the one loaded target, greedy, under auto, each generation with a fresh engine
(as a `run` process starts), modes interleaved per prompt and repeat with their order rotated.
The datastore mode drafts as `--datastore` does, without the suffix cache of earlier outputs
(across repeats it would learn the answers themselves). Speedups are medians over prompts and
repeats of per-generation ratios against the target alone's tokens/s on the same prompt and repeat."""

from __future__ import annotations

import ast
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import models, options
from benchmarks.harness.summary import median, paired_ratios, save
from localspec.backend.model import Model
from localspec.backend.tokenizer import Tokenizer
from localspec.bench.runs import load_prompts
from localspec.config.settings import Settings
from localspec.datastore import build, store
from localspec.datastore.meta import Meta, SourceFile
from localspec.datastore.store import Datastore
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix import SuffixDrafter
from localspec.drafters.suffix_tree import DEPTH
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.session.generation import generation_config
from localspec.session.prompt import prompt_tokens

ROOT = Path(__file__).resolve().parents[2]
MODES = ("alone", "default", "suffix", "datastore")


def functions(folder: Path, count: int) -> list[tuple[str, str, str]]:
    """(file, name, source) of `count` functions of 10-40 lines, spread over the folder's files."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and 10 <= node.end_lineno - node.lineno + 1 <= 40:  # type: ignore[operator]
                found.append(
                    (
                        str(path.relative_to(folder.parent)),
                        node.name,
                        ast.get_source_segment(text, node) or "",
                    )
                )
    step = max(1, len(found) // count)
    return found[::step][:count]


def related_prompts(folder: Path, count: int) -> list[tuple[str, str]]:
    """Half ask to continue a function from its first lines, half to add a docstring to one."""
    out = []
    for i, (file, name, source) in enumerate(functions(folder, count)):
        if i % 2 == 0:
            head = "\n".join(source.splitlines()[:3])
            out.append(
                (
                    f"continue:{name}",
                    f"Here is the start of `{name}` from {file}:\n```python\n{head}\n```\nContinue it to "
                    "the end of the function.",
                )
            )
        else:
            out.append(
                (
                    f"docstring:{name}",
                    f"Add a docstring to `{name}` and print the whole function:\n```python\n{source}\n```",
                )
            )
    return out


def lookup_latency(tokens: np.ndarray, size: int, rng: np.random.Generator) -> dict:
    """Build a datastore of `size` tokens (the folder's, repeated) and time lookups in it."""
    copies = -(-size // len(tokens))
    pieces = [tokens] * copies
    files = []
    start = 0
    for i, piece in enumerate(pieces):
        files.append(SourceFile(f"copy{i}", 0, 0, "", start, len(piece)))
        start += len(piece) + 1
    meta = Meta("million", "-", 0, "-", [], [], [], files, sum(map(len, pieces)))
    t0 = time.perf_counter()
    store.write(meta, store.joined(pieces))
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = store.open_index(store.read_meta("million"))
    open_s = time.perf_counter() - t0
    all_tokens = np.asarray(index.tokens)
    times = {"hit": [], "miss": []}
    for kind in times:
        for _ in range(1000):
            if kind == "hit":
                at = int(rng.integers(64, len(all_tokens) - 64))
                context = all_tokens[at - 40 : at].tolist()
            else:
                context = rng.integers(5, 49152, 40).tolist()
            t = time.perf_counter()
            index.match(context, 2, DEPTH)
            times[kind].append(1e3 * (time.perf_counter() - t))
    out = {"tokens": meta.n_tokens, "bytes": store.disk_size("million"), "build_s": build_s, "open_s": open_s}
    for kind, ms in times.items():
        out[f"{kind}_median_ms"] = median(ms)
        out[f"{kind}_p99_ms"] = float(np.percentile(ms, 99))
    return out


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    ap.add_argument("--folder", type=Path, default=ROOT / "localspec")
    ap.add_argument("--prompts", type=Path, default=ROOT.parent / "shared" / "bench" / "specbench-dev.jsonl")
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--unrelated", type=int, default=6)
    options.add_repeat(ap, 2)
    options.add_generation(ap, temp=False)
    options.add_json(ap)
    a = options.parse(ap)
    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="localspec-bench-data-")
    rng = np.random.default_rng(0)

    with Tokenizer.load(a.target) as tok:
        report = build.build(build.new_meta("code", tok, [a.folder], ["*.py"], ()), tok)
    meta = report.meta
    print(
        f"datastore of {a.folder}: {meta.n_tokens:,} tokens from {len(meta.files)} files, built in "
        f"{report.seconds:.2f} s, "
        f"{store.disk_size('code') / 1e6:.1f} MB",
        flush=True,
    )
    code = Datastore(meta, store.open_index(meta))
    tokens = np.asarray(code.index().tokens)
    latency = lookup_latency(tokens[tokens >= 0], 1_000_000, rng)
    print(
        f"1M-token datastore: built in {latency['build_s']:.2f} s, {latency['bytes'] / 1e6:.1f} MB, opened "
        f"in {latency['open_s'] * 1e3:.1f} ms; "
        f"lookup median {latency['hit_median_ms']:.3f} ms (p99 {latency['hit_p99_ms']:.3f}) on a hit, "
        f"{latency['miss_median_ms']:.3f} ms (p99 {latency['miss_p99_ms']:.3f}) on a miss",
        flush=True,
    )

    target = models.load(a.target)
    texts = [("related", pid, text) for pid, text in related_prompts(a.folder, a.count)]
    texts += [("unrelated", p.id, p.text) for p in load_prompts(a.prompts, [], 1)[: a.unrelated]]
    prompts = [(group, pid, prompt_tokens(target, text, raw=False)) for group, pid, text in texts]
    config = generation_config(Settings().merged({"temp": 0.0, "max_tokens": a.n}))
    rows = [
        generation(config, target, code, prompt, r, mode)
        for r in range(a.repeat)
        for i, prompt in enumerate(prompts)
        for mode in MODES[(i + r) % len(MODES) :] + MODES[: (i + r) % len(MODES)]
    ]
    target.close()
    summarise(rows)
    save(a.json, {"latency": latency, "datastore_tokens": meta.n_tokens, "rows": rows})


def generation(
    config: GenerationConfig, target: Model, code: Datastore, prompt: tuple, r: int, mode: str
) -> dict:
    """One generation of `prompt` (group, id, tokens) in `mode`, on a fresh engine: its row."""
    group, pid, tokens = prompt
    drafter = {
        "alone": lambda: None,
        "default": NgramDrafter,
        "suffix": lambda: SuffixDrafter(None, 1),
        "datastore": lambda: SuffixDrafter(None, 1, [code]),
    }[mode]()
    target.truncate(0)
    engine = SpeculativeEngine(target, drafter, drafter.name if drafter else "none")
    done = drain(engine.generate(tokens, config))
    s = done.stats
    from_store = s.origins.get("datastore")
    print(
        f"{group} {pid} #{r + 1} {mode}: {s.tokens_per_second:.2f} tok/s, "
        f"{s.n_accepted}/{s.n_generated} drafted"
        + (f", {from_store.accepted} from the datastore" if from_store else ""),
        flush=True,
    )
    return {
        "group": group,
        "prompt": pid,
        "repeat": r,
        "mode": mode,
        "tokens_per_second": s.tokens_per_second,
        "generated": s.n_generated,
        "accepted": s.n_accepted,
        "from_datastore": from_store.accepted if from_store else 0,
        "tokens": done.tokens,
    }


def summarise(rows: list[dict]) -> None:
    key = lambda r: (r["group"], r["prompt"], r["repeat"])  # noqa: E731
    by = {(key(r), r["mode"]): r for r in rows}
    speed, group_of = lambda r: r["tokens_per_second"], lambda r: r["group"]  # noqa: E731
    over_alone = paired_ratios(rows, key, speed, group_of, baseline="alone")
    over_default = paired_ratios(rows, key, speed, group_of, baseline="default")
    print(
        "\n| prompts | mode | tok/s (median) | over the target alone | over the default | share of tokens "
        "from the datastore | same tokens as the target alone |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for group in ("related", "unrelated"):
        keys = sorted({key(r) for r in rows if r["group"] == group})
        for mode in MODES:
            mine = [by[(k, mode)] for k in keys]
            share = sum(r["from_datastore"] for r in mine) / max(1, sum(r["generated"] for r in mine))
            same = sum(by[(k, mode)]["tokens"] == by[(k, "alone")]["tokens"] for k in keys)
            tps = median(r["tokens_per_second"] for r in mine)
            ratios = f"{over_alone[group][mode]:.2f}x | {over_default[group][mode]:.2f}x"
            print(f"| {group} | {mode} | {tps:.2f} | {ratios} | {share:.1%} | {same}/{len(keys)} |")


if __name__ == "__main__":
    main()
