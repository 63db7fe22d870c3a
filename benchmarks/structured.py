#!/usr/bin/env python3
"""Structured output under speculation: JSON extraction prompts with a schema, greedy, the target
alone and drafted (auto, fixed 8), each with and without the schema's grammar, in one process with
the modes interleaved per prompt; beside them llama-cpp-python's own `create_completion` with a
`LlamaGrammar` of the same schema (its grammar sampler in C). Reports tokens/s, speedups over the
target alone under the same condition, the engine's time outside llama.cpp per token, the share
of emitted tokens the grammar forced (it allowed no other token), and the drafted tokens that were
drafted for free (text the grammar allowed alone, backend/forced.py), beside the same fixed-8 draft
without them (`fixed-8/paid`: every token a draft-model pass) under the schema.

Usage: python benchmarks/structured.py TARGET.gguf DRAFT.gguf [-n 96] [--repeat 1] [--json OUT.json]"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import localspec  # noqa: E402, F401  (first: llama.cpp's libraries load before NumPy's, see localspec/__init__.py)
from localspec.backend.grammar import Grammar, schema_grammar  # noqa: E402
from localspec.backend.hardware import physical_cores  # noqa: E402
from localspec.backend.model import Model, ModelOptions  # noqa: E402
from localspec.drafters.draft_model import DraftModelDrafter  # noqa: E402
from localspec.engine.events import PromptEvent, drain  # noqa: E402
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine  # noqa: E402
from localspec.sampling.dist import SamplingParams  # noqa: E402
from localspec.session.prompt import prompt_tokens  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
    "required": ["name", "age", "city"],
}
PRODUCT = {
    "type": "object",
    "properties": {
        "product": {"type": "string"},
        "price": {"type": "number"},
        "in_stock": {"type": "boolean"},
    },
    "required": ["product", "price", "in_stock"],
}
EVENT = {
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "date": {"type": "string"},
        "attendees": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["event", "date", "attendees"],
}
TASKS = [
    (
        "Extract the person as JSON with name, age and city: Maria Lopez is a 34 year old engineer who "
        "lives in Madrid.",
        PERSON,
    ),
    (
        "Return JSON with the person's name, age and city. Text: Last spring, 61-year-old retired teacher "
        "Tom Becker moved from Hamburg to Lisbon.",
        PERSON,
    ),
    (
        "Give the product as JSON (product, price, in_stock): The UltraBlend 3000 blender costs $89.99 and "
        "is currently sold out.",
        PRODUCT,
    ),
    (
        "As JSON with product, price and in_stock: 'Trail runner shoes, now 120 euros, available in all "
        "sizes.'",
        PRODUCT,
    ),
    (
        "Extract the event as JSON with event, date and attendees: The quarterly planning meeting on March "
        "3rd will be attended by Ana, Raj and Lee.",
        EVENT,
    ),
    (
        "JSON with event, date and attendees for: 'Kim's birthday dinner, Friday 12 July, with Sam, Alex, "
        "Priya and Jo.'",
        EVENT,
    ),
]
GREEDY = SamplingParams(temperature=0.0)
MODES = {
    "alone": ("off", None),
    "auto": ("auto", None),
    "fixed-8": ("fixed", 8),
    "fixed-8/paid": ("fixed", 8),
}


class _NothingForced:
    def tokens(self, grammar: Grammar) -> list[int]:
        return []


class PaidDrafter(DraftModelDrafter):
    """The draft model drafting every token itself, forced text included."""

    def _forced(self) -> _NothingForced:  # type: ignore[override]
        return _NothingForced()


def forced_share(target: Model, tokens: list[int], gbnf: str) -> float:
    """The share of `tokens` at whose position the grammar allowed that token alone."""
    grammar, ids, forced = Grammar.compile(target.vocab, gbnf), np.arange(target.n_vocab, dtype=np.int32), 0
    for t in tokens:
        if target.is_eog(t):
            break
        forced += int(grammar.allowed(ids).sum()) == 1
        grammar.accept(t)
    grammar.close()
    return forced / max(len(tokens), 1)


def theirs(path: Path, tokens: list[int], n: int, threads: int, gbnf: str | None) -> tuple[float, str]:
    from llama_cpp import Llama, LlamaGrammar

    llm = Llama(str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    try:
        grammar = LlamaGrammar.from_string(gbnf, verbose=False) if gbnf else None
        first, count, text = None, 0, ""
        for chunk in llm.create_completion(
            tokens, max_tokens=n, stream=True, temperature=0.0, top_k=1, repeat_penalty=1.0, grammar=grammar
        ):
            count += 1
            text += chunk["choices"][0]["text"]
            if first is None:
                first = time.perf_counter()
        return ((count - 1) / (time.perf_counter() - first) if first and count > 1 else 0.0), text
    finally:
        llm.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("draft", type=Path)
    ap.add_argument("-n", type=int, default=96)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    threads = physical_cores()
    opts = ModelOptions(n_ctx=4096, n_threads=threads, n_threads_batch=threads)
    target, draft = Model(a.target, opts), Model(a.draft, opts)
    engines = {
        "alone": SpeculativeEngine(target, None),
        **{
            m: SpeculativeEngine(target, DraftModelDrafter(draft, target.n_vocab), "draft-model")
            for m in ("auto", "fixed-8")
        },
        "fixed-8/paid": SpeculativeEngine(target, PaidDrafter(draft, target.n_vocab), "draft-model"),
    }
    rows: list[dict] = []
    for r in range(a.repeat):
        for i, (text, schema) in enumerate(TASKS):
            tokens = prompt_tokens(target, text, raw=False)
            gbnf = schema_grammar(json.dumps(schema))
            for grammar in (None, gbnf):
                condition = "schema" if grammar else "free"
                for mode, (draft_mode, draft_max) in MODES.items():
                    if mode == "fixed-8/paid" and not grammar:
                        continue
                    config = GenerationConfig(
                        max_tokens=a.n,
                        sampling=GREEDY,
                        draft_mode=draft_mode,
                        grammar=grammar,
                        **({"draft_max": draft_max} if draft_max else {}),
                    )
                    target.truncate(0)
                    draft.truncate(0)
                    marks: list[tuple[float, float]] = []
                    done = drain(
                        engines[mode].generate(tokens, config),
                        lambda ev, marks=marks: (
                            marks.append((target.busy_s, draft.busy_s))
                            if isinstance(ev, PromptEvent)
                            else None
                        ),
                    )
                    s = done.stats
                    outside = s.elapsed_s - (target.busy_s - marks[0][0]) - (draft.busy_s - marks[0][1])
                    row = {
                        "prompt": i,
                        "repeat": r,
                        "condition": condition,
                        "mode": mode,
                        "tokens_per_second": s.tokens_per_second,
                        "generated": s.n_generated,
                        "drafted": s.n_drafted,
                        "forced": s.n_forced,
                        "accepted": s.n_accepted,
                        "outside_ms_per_token": 1e3 * outside / max(s.n_generated, 1),
                        "text": done.text,
                    }
                    if grammar and mode == "alone":
                        row["valid"] = _valid(done.text)
                        row["forced_share"] = forced_share(target, done.tokens, gbnf)
                    rows.append(row)
                    print(
                        f"#{r} p{i} {condition:6} {mode:12} {s.tokens_per_second:6.1f} tok/s, "
                        f"{s.n_generated} tokens, accepted {s.n_accepted}/{s.n_drafted} "
                        f"({s.n_forced} for free), "
                        f"outside {row['outside_ms_per_token']:.2f} ms/token",
                        flush=True,
                    )
                tps, out = theirs(a.target, tokens, a.n, threads, grammar)
                rows.append(
                    {
                        "prompt": i,
                        "repeat": r,
                        "condition": condition,
                        "mode": "llama-cpp-python",
                        "tokens_per_second": tps,
                        "text": out,
                    }
                )
                print(f"#{r} p{i} {condition:6} llama-cpp-python {tps:6.1f} tok/s", flush=True)
    report(rows)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


def _valid(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except json.JSONDecodeError:
        return False


def report(rows: list[dict]) -> None:
    print(
        "\n| condition | mode | tok/s (median) | speedup over alone (median of per-prompt ratios) | "
        "accepted/drafted | drafted for free | outside llama.cpp, ms/token |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for condition in ("free", "schema"):
        alone = {
            (r["prompt"], r["repeat"]): r["tokens_per_second"]
            for r in rows
            if r["condition"] == condition and r["mode"] == "alone"
        }
        for mode in (*MODES, "llama-cpp-python"):
            mine = [r for r in rows if r["condition"] == condition and r["mode"] == mode]
            if not mine:
                continue
            ratios = [r["tokens_per_second"] / alone[(r["prompt"], r["repeat"])] for r in mine]
            acc = (
                f"{sum(r['accepted'] for r in mine)}/{sum(r['drafted'] for r in mine)}"
                if "drafted" in mine[0]
                else "-"
            )
            out = (
                f"{statistics.median(r['outside_ms_per_token'] for r in mine):.2f}"
                if "outside_ms_per_token" in mine[0]
                else "-"
            )
            free = (
                f"{sum(r['forced'] for r in mine)}/{sum(r['drafted'] for r in mine)}"
                if "forced" in mine[0]
                else "-"
            )
            print(
                f"| {condition} | {mode} | {statistics.median(r['tokens_per_second'] for r in mine):.2f} | "
                f"{statistics.median(ratios):.2f}x | {acc} | {free} | {out} |"
            )
    schema = [r for r in rows if r.get("forced_share") is not None]
    print(
        f"\nschema, target alone: {sum(r['valid'] for r in schema)}/{len(schema)} outputs parse as JSON; "
        f"tokens the grammar forced: median {statistics.median(r['forced_share'] for r in schema):.1%}"
    )


if __name__ == "__main__":
    main()
