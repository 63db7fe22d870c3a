"""Plain rendering of engine events: text to stdout as it arrives, one summary line to stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TextIO

from localspec.engine.events import DoneEvent, Event, GenerationStats, NoticeEvent, TokenEvent, drain


def summary_line(stats: GenerationStats, stop_reason: str) -> str:
    parts = [
        f"{stats.n_generated} tokens in {stats.elapsed_s:.2f}s ({stats.tokens_per_second:.1f} tok/s)",
        f"drafter {stats.drafter}",
    ]
    if stats.n_drafted:
        parts.append(
            f"accepted {stats.n_accepted}/{stats.n_drafted} drafted ({stats.acceptance_rate:.1%}), "
            f"{stats.mean_tokens_per_step:.2f} tokens/pass"
        )
    reused = stats.n_prompt - stats.n_prompt_evaluated
    evaluated = f", {stats.n_prompt_evaluated} evaluated" if reused > 0 else ""
    parts.append(f"prompt {stats.n_prompt} tokens{evaluated} ({stats.prompt_tokens_per_second:.0f} tok/s)")
    if stats.load_s:
        parts.append(f"load {stats.load_s:.2f}s")
    parts.append(f"stop: {stop_reason}")
    return " · ".join(parts)


def render_plain(events: Iterable[Event], out: TextIO | None = None, err: TextIO | None = None) -> DoneEvent:
    # The streams are looked up per call, not bound at import: whoever stands in for them now counts.
    out, err = out or sys.stdout, err or sys.stderr

    def show(ev: Event) -> None:
        if isinstance(ev, TokenEvent) and ev.text:
            out.write(ev.text)
            out.flush()
        elif isinstance(ev, NoticeEvent):
            err.write(f"note: {ev.message}\n")

    done = drain(events, show)
    out.write(done.tail + "\n")
    out.flush()
    return done


def collect(events: Iterable[Event], err: TextIO | None = None) -> DoneEvent:
    """The DoneEvent, with notices on stderr and nothing else shown."""
    stream = err or sys.stderr
    return drain(events, lambda ev: stream.write(f"note: {ev.message}\n") if isinstance(ev, NoticeEvent) else None)


def result_json(done: DoneEvent, seed: int | None) -> str:
    return json.dumps(
        {
            "text": done.text,
            "tokens": done.tokens,
            "stop_reason": done.stop_reason,
            "seed": seed,
            "stats": done.stats.to_dict(),
        },
        ensure_ascii=False,
    )
