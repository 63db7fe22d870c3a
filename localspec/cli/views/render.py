"""Plain rendering of engine events: text to stdout as it arrives, one summary line to stderr."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING, TextIO

from localspec import __version__
from localspec.engine.events import (
    DoneEvent,
    Event,
    GenerationStats,
    NoticeEvent,
    TokenEvent,
    drain,
)

if TYPE_CHECKING:
    from localspec.config.settings import Settings
    from localspec.session.model_files import ModelFiles


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
        if stats.speedup_estimate and stats.tokens_per_second:
            parts.append(
                f"~{stats.speedup_estimate:.2f}x the target alone (est. {stats.target_alone_tps:.1f} tok/s)"
            )
    if stats.end_to_end_estimate and stats.drafter != "none":
        parts.append(f"first token {stats.first_token_s:.2f}s, end to end ~{stats.end_to_end_estimate:.2f}x")
    reused = stats.n_prompt - stats.n_prompt_evaluated
    evaluated = f", {stats.n_prompt_evaluated} evaluated" if reused > 0 else ""
    parts.append(f"prompt {stats.n_prompt} tokens{evaluated} ({stats.prompt_tokens_per_second:.0f} tok/s)")
    if stats.load_s:
        parts.append(f"load {stats.load_s:.2f}s")
    if stats.threads_fewest < stats.threads_default:
        parts.append(
            f"threads {stats.threads_fewest}-{stats.threads_default} (fewer while the machine was busy)"
        )
    parts.append(f"stop: {stop_reason}")
    if stats.draft_mode == "auto" and stats.drafter != "none":
        # What auto did, and why it drafted less than it might have: the last drafter it stopped.
        did = f"auto: drafted {stats.n_steps_drafted} of {stats.n_steps} steps"
        parts.append(f"{did}; {stats.notes[-1]}" if stats.notes else did)
    return " · ".join(parts)


def fit(line: str, width: int | None) -> str:
    """`line` in rows of fewer than `width` columns (None: one row), broken at spaces and after a
    part's separator, so that no terminal wraps it inside a word; the rows joined by spaces are
    `line` again. A word wider than the terminal keeps a row of its own."""
    if not width or len(line) < width:
        return line
    units: list[str] = []
    for word in line.split(" "):
        if word == "·" and units:
            units[-1] += " ·"
        else:
            units.append(word)
    rows = [units[0]]
    for unit in units[1:]:
        if len(rows[-1]) + 1 + len(unit) < width:
            rows[-1] += " " + unit
        else:
            rows.append(unit)
    return "\n".join(rows)


def terminal_width(stream: TextIO) -> int | None:
    """The columns of the terminal `stream` shows on; None when it shows on none (a pipe, a file)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except OSError:
        return None


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
    return drain(
        events, lambda ev: stream.write(f"note: {ev.message}\n") if isinstance(ev, NoticeEvent) else None
    )


def provenance(files: ModelFiles, settings: Settings) -> dict:
    """What a result was produced with, in every command's --json: the version, the model files,
    and the settings in force (by the names of the settings record)."""
    return {
        "version": __version__,
        "model_files": {"target": str(files.model), "draft": files.draft_name},
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(settings).items()},
    }


def result_json(done: DoneEvent, seed: int | None, files: ModelFiles, settings: Settings) -> str:
    return json.dumps(
        {
            "text": done.text,
            "tokens": done.tokens,
            "stop_reason": done.stop_reason,
            "seed": seed,
            "stats": done.stats.to_dict(),
            **provenance(files, settings),
        },
        ensure_ascii=False,
    )
