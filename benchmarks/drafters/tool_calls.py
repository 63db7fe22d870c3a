"""Tool calls as an agent makes them, through `localspec serve` and the openai client: scripted
conversations of tool rounds (two tools, `tool_choice` required, greedy), each reply asked of the
target alone (`speculative.mode: off`), `auto` and fixed 8 in turn on the same conversation, so the
modes meet the same prompts. Reports tokens/s from each reply's `timings`, speedups over the target
alone (medians of per-reply ratios), acceptance, and whether every call parsed and the drafted
replies equal the target alone's (greedy: they must).

    python -m benchmarks.drafters.tool_calls TARGET.gguf --draft DRAFT.gguf [--chat-template FILE]
        [--rounds 4] [--forced] [--json OUT.json]"""

from __future__ import annotations

import json
from pathlib import Path

import openai

from benchmarks.drafters.structured import GREEDY, forced_share
from benchmarks.harness import models, options
from benchmarks.harness.processes import server
from benchmarks.harness.summary import median, paired_ratios, save
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.server.tool_request import tool_use
from localspec.session.prompt import render_chat, template_of, tokenize_rendered
from localspec.session.tool_format import for_template, tool_format, tool_grammar


def tool(name: str, description: str, **properties: str) -> dict:
    schema = {
        "type": "object",
        "properties": {k: {"type": v} for k, v in properties.items()},
        "required": list(properties),
    }
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOLS = [
    tool("get_weather", "The weather in a city now", city="string"),
    tool(
        "search_flights",
        "Flights between two cities on a date",
        origin="string",
        destination="string",
        date="string",
    ),
]
TASKS = [
    "I am planning a trip from Berlin to Lisbon on 2026-03-14. Check the weather in both cities and find "
    "flights.",
    "Compare the weather in Oslo, Stockholm and Helsinki, then look for a flight from Oslo to Helsinki on "
    "2026-05-02.",
    "Find flights from Madrid to Rome for 2026-07-20 and tell me what the weather is like in Rome.",
]
MODES = {
    "alone": {"speculative.mode": "off"},
    "auto": {"speculative.mode": "auto"},
    "fixed-8": {"speculative.mode": "fixed", "speculative.n_max": 8},
}


def result(name: str, args: dict) -> str:
    if name == "get_weather":
        return json.dumps({"city": args.get("city"), "sky": "clear", "celsius": 17})
    return json.dumps(
        {"flights": [{"number": "LS 204", "departs": "08:40"}, {"number": "LS 377", "departs": "17:15"}]}
    )


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_draft(ap, required=True)
    ap.add_argument("--chat-template", type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument(
        "--forced",
        action="store_true",
        help="also the share of tokens the call grammar forces (in-process, greedy, the target alone)",
    )
    options.add_json(ap)
    a = options.parse(ap)
    template = ["--chat-template", a.chat_template] if a.chat_template else []
    rows: list[dict] = []
    with server(["-m", a.target, "-d", a.draft, "--ctx", "4096", *template]) as port:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=600
        )
        for t, task in enumerate(TASKS):
            rows += conversation(client, t, task, a.rounds)
    report(rows)
    if a.forced:
        print(
            "\ntokens the call grammar forced (it allowed no other), per task: "
            f"{forced_shares(a.target, a.chat_template)}"
        )
    save(a.json, rows)


def conversation(client: openai.OpenAI, t: int, task: str, rounds: int) -> list[dict]:
    """Task `t`'s rounds: each reply asked in every mode, the target alone's calls answered and the
    conversation carried on with them."""
    messages: list[dict] = [{"role": "user", "content": task}]
    rows: list[dict] = []
    for r in range(rounds):
        replies = {}
        for mode, extra in MODES.items():
            out = client.chat.completions.create(
                model="agent",
                messages=messages,
                tools=TOOLS,
                tool_choice="required",
                temperature=0,
                max_tokens=128,
                extra_body=extra,
            )
            timing, calls = out.model_extra["timings"], out.choices[0].message.tool_calls or []
            replies[mode] = [(c.function.name, c.function.arguments) for c in calls]
            rows.append(
                {
                    "task": t,
                    "round": r,
                    "mode": mode,
                    "tokens_per_second": timing["predicted_per_second"],
                    "generated": timing["predicted_n"],
                    "drafted": timing["draft_n"],
                    "accepted": timing["draft_n_accepted"],
                    "parsed": out.choices[0].finish_reason == "tool_calls" and bool(calls),
                    "calls": replies[mode],
                }
            )
            print(
                f"task {t} round {r} {mode:8} {timing['predicted_per_second']:6.1f} tok/s, "
                f"{timing['predicted_n']} tokens, accepted {timing['draft_n_accepted']}/{timing['draft_n']}: "
                f"{replies[mode]}",
                flush=True,
            )
        rows[-1]["same_as_alone"] = rows[-2]["same_as_alone"] = (
            replies["auto"] == replies["fixed-8"] == replies["alone"]
        )
        calls = replies["alone"]
        if not calls:
            break
        ids = [f"call_{t}_{r}_{i}" for i in range(len(calls))]
        asked = [
            {"id": k, "type": "function", "function": {"name": n, "arguments": args}}
            for (n, args), k in zip(calls, ids, strict=True)
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": asked})
        messages += [
            {"role": "tool", "tool_call_id": k, "content": result(n, json.loads(args))}
            for (n, args), k in zip(calls, ids, strict=True)
        ]
    return rows


def forced_shares(target_path: Path, template: Path | None) -> list[str]:
    """Each task's first reply, greedy under the grammar of a required call, by the target alone:
    the share of its tokens at whose position the grammar allowed that token alone."""
    target = models.load(target_path, chat_template=template.read_text() if template else None)
    use, fmt = tool_use({"tools": TOOLS, "tool_choice": "required"}), tool_format(template_of(target))
    shares = []
    for task in TASKS:
        messages, tools = for_template([{"role": "user", "content": task}], use, fmt)
        gbnf = tool_grammar(use, fmt)
        tokens = tokenize_rendered(target, render_chat(target, messages, tools))
        target.truncate(0)
        done = drain(
            SpeculativeEngine(target, None).generate(
                tokens, GenerationConfig(max_tokens=128, sampling=GREEDY, draft_mode="off", grammar=gbnf)
            )
        )
        shares.append(f"{forced_share(target, done.tokens, gbnf):.1%} of {len(done.tokens)}")
    return shares


def report(rows: list[dict]) -> None:
    tps = lambda r: r["tokens_per_second"]  # noqa: E731
    speedups = paired_ratios(rows, lambda r: (r["task"], r["round"]), tps, baseline="alone")["all"]
    print(
        "\n| mode | tok/s (median) | speedup over alone (median of per-reply ratios) | accepted/drafted | "
        "calls parsed | same calls as alone |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        same = "-" if mode == "alone" else f"{sum(r.get('same_as_alone', False) for r in mine)}/{len(mine)}"
        print(
            f"| {mode} | {median(r['tokens_per_second'] for r in mine):.2f} | "
            f"{speedups[mode]:.2f}x | "
            f"{sum(r['accepted'] for r in mine)}/{sum(r['drafted'] for r in mine)} | "
            f"{sum(r['parsed'] for r in mine)}/{len(mine)} | {same} |"
        )


if __name__ == "__main__":
    main()
