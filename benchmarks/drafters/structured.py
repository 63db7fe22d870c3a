"""Structured output under speculation: JSON extraction prompts with a schema, greedy, the target
alone and drafted (auto, fixed 8), each with and without the schema's grammar, in one process with
the modes interleaved per prompt; beside them llama-cpp-python's own `create_completion` with a
`LlamaGrammar` of the same schema (its grammar sampler in C). Reports tokens/s, speedups over the
target alone under the same condition, the engine's time outside llama.cpp per token, the share
of emitted tokens the grammar forced (it allowed no other token), and the drafted tokens that were
drafted for free (text the grammar allowed alone, backend/forced.py), beside the same fixed-8 draft
without them (`fixed-8/paid`: every token a draft-model pass) under the schema.

    python -m benchmarks.drafters.structured TARGET.gguf --draft DRAFT.gguf [-n 96] [--repeat 1]
        [--json OUT.json]"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from llama_cpp import Llama, LlamaGrammar

from benchmarks.harness import models, options
from benchmarks.harness.llama_cpp_python import stream_rate
from benchmarks.harness.summary import median, paired_ratios, save
from localspec.backend.grammar import Grammar, schema_grammar
from localspec.backend.hardware import physical_cores
from localspec.backend.model import Model
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.engine.events import PromptEvent, drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.session.prompt import prompt_tokens

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
    """llama-cpp-python's create_completion, greedy, with a LlamaGrammar of `gbnf` (if any)."""
    llm = Llama(str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    try:
        grammar = LlamaGrammar.from_string(gbnf, verbose=False) if gbnf else None
        return stream_rate(llm, tokens, n, temperature=0.0, top_k=1, grammar=grammar)
    finally:
        llm.close()


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_draft(ap, required=True)
    options.add_generation(ap, n=96, temp=False)
    options.add_repeat(ap)
    options.add_json(ap)
    a = options.parse(ap)
    threads = physical_cores()
    target, draft = models.load(a.target), models.load(a.draft)
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
                for mode in MODES:
                    if mode == "fixed-8/paid" and not grammar:
                        continue
                    rows.append(generation(engines[mode], target, draft, tokens, grammar, a.n, mode))
                    rows[-1].update(prompt=i, repeat=r, condition=condition)
                    generated = rows[-1].pop("tokens")
                    if grammar and mode == "alone":
                        rows[-1]["valid"] = _valid(rows[-1]["text"])
                        rows[-1]["forced_share"] = forced_share(target, generated, gbnf)
                    x = rows[-1]
                    print(
                        f"#{r} p{i} {condition:6} {mode:12} {x['tokens_per_second']:6.1f} tok/s, "
                        f"{x['generated']} tokens, accepted {x['accepted']}/{x['drafted']} "
                        f"({x['forced']} for free), outside {x['outside_ms_per_token']:.2f} ms/token",
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
    save(a.json, rows)


def generation(
    engine: SpeculativeEngine,
    target: Model,
    draft: Model,
    tokens: list[int],
    grammar: str | None,
    n: int,
    mode: str,
) -> dict:
    """One greedy generation: its speed, drafts and the engine's time outside llama.cpp per token."""
    draft_mode, draft_max = MODES[mode]
    config = GenerationConfig(
        max_tokens=n,
        sampling=GREEDY,
        draft_mode=draft_mode,
        grammar=grammar,
        **({"draft_max": draft_max} if draft_max else {}),
    )
    target.truncate(0)
    draft.truncate(0)
    marks: list[tuple[float, float]] = []
    mark = lambda ev: marks.append((target.busy_s, draft.busy_s)) if isinstance(ev, PromptEvent) else None  # noqa: E731
    done = drain(engine.generate(tokens, config), mark)
    s = done.stats
    outside = s.elapsed_s - (target.busy_s - marks[0][0]) - (draft.busy_s - marks[0][1])
    return {
        "mode": mode,
        "tokens_per_second": s.tokens_per_second,
        "generated": s.n_generated,
        "drafted": s.n_drafted,
        "forced": s.n_forced,
        "accepted": s.n_accepted,
        "outside_ms_per_token": 1e3 * outside / max(s.n_generated, 1),
        "text": done.text,
        "tokens": done.tokens,
    }


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
    pair, tps = lambda r: (r["prompt"], r["repeat"], r["condition"]), lambda r: r["tokens_per_second"]  # noqa: E731
    speedups = paired_ratios(rows, pair, tps, lambda r: r["condition"], baseline="alone")
    for condition in ("free", "schema"):
        for mode in (*MODES, "llama-cpp-python"):
            mine = [r for r in rows if r["condition"] == condition and r["mode"] == mode]
            if not mine:
                continue
            acc = (
                f"{sum(r['accepted'] for r in mine)}/{sum(r['drafted'] for r in mine)}"
                if "drafted" in mine[0]
                else "-"
            )
            out = (
                f"{median(r['outside_ms_per_token'] for r in mine):.2f}"
                if "outside_ms_per_token" in mine[0]
                else "-"
            )
            free = (
                f"{sum(r['forced'] for r in mine)}/{sum(r['drafted'] for r in mine)}"
                if "forced" in mine[0]
                else "-"
            )
            print(
                f"| {condition} | {mode} | {median(r['tokens_per_second'] for r in mine):.2f} | "
                f"{speedups[condition][mode]:.2f}x | {acc} | {free} | {out} |"
            )
    schema = [r for r in rows if r.get("forced_share") is not None]
    print(
        f"\nschema, target alone: {sum(r['valid'] for r in schema)}/{len(schema)} outputs parse as JSON; "
        f"tokens the grammar forced: median {median(r['forced_share'] for r in schema):.1%}"
    )


if __name__ == "__main__":
    main()
