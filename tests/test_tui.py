"""The live display, rendered into a recording console, and the non-TTY path through a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import TinyModels, model_options
from rich.console import Console

from localspec.backend.model import Model
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.engine.events import DoneEvent, GenerationStats, StepEvent, TokenEvent
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.cli.views.render import summary_line
from localspec.sampling import SamplingParams
from localspec.cli.views.tui import LiveRenderer, LiveStats


def fake_events():
    stats = GenerationStats(drafter="draft-model", n_generated=4, n_drafted=4, n_accepted=3, n_steps=2)
    yield StepEvent("draft-model", 3, 2, 3)
    yield TokenEvent(10, "Hello", "draft-model")
    yield TokenEvent(11, " wor", "draft-model")
    yield TokenEvent(12, "ld\nsecond", None)
    yield StepEvent("draft-model", 1, 1, 2)
    yield TokenEvent(13, " line", "draft-model")
    yield DoneEvent("length", stats, "!", "Hello world\nsecond line!", [10, 11, 12, 13])


def test_status_line_content():
    clock = iter([0.0, 0.5, 0.6, 0.7, 0.8, 2.0]).__next__
    s = LiveStats(clock=clock)
    s.on_step(StepEvent("draft-model", 4, 3, 4))
    for _ in range(4):
        s.on_token()
    text = s.status().plain
    assert "accept 75% (3/4)" in text and "4.00 tok/pass" in text and "draft-model" in text and "tok/s" in text


def test_live_render_streams_all_text_and_colours_drafted_tokens():
    console = Console(record=True, force_terminal=True, width=60, color_system="truecolor")
    done = LiveRenderer(console, show_accepted=True).render(fake_events())
    assert done.stop_reason == "length"
    styled = console.export_text(styles=True, clear=False)
    out = console.export_text()  # the recording holds the live frames too
    assert "Hello world\n" in out and "second line!\n" in out
    assert "accept 75% (3/4)" in out and "2.00 tok/pass" in out
    assert "\x1b[32mHello" in styled  # drafted tokens in green
    assert "\x1b[32mld" not in styled  # the target's own token is not


def test_live_render_keeps_long_output_whole():
    console = Console(record=True, force_terminal=True, width=40, height=10)
    lines = [f"line {i}\n" for i in range(200)]
    stats = GenerationStats(n_generated=200)
    events = [TokenEvent(i, t, None) for i, t in enumerate(lines)] + [DoneEvent("length", stats, "", "".join(lines), [])]
    LiveRenderer(console).render(events)
    out = console.export_text()
    for i in range(200):
        assert f"line {i}\n" in out


def test_live_render_on_a_real_engine(tiny: TinyModels):
    with Model(tiny.target, model_options()) as t, Model(tiny.close, model_options()) as d:
        engine = SpeculativeEngine(t, DraftModelDrafter(d), "draft-model")
        config = GenerationConfig(max_tokens=40, sampling=SamplingParams(temperature=0.0), draft_max=4)
        console = Console(record=True, force_terminal=True, width=80)
        done = LiveRenderer(console, refresh_per_second=50).render(engine.generate(t.tokenize("the cat"), config))
    printable = lambda t: "".join(c for c in t if c.isprintable())  # noqa: E731
    assert printable(done.text.split("\n")[-1]) in printable(console.export_text())
    s = done.stats
    line = summary_line(s, done.stop_reason)
    assert f"{s.n_generated} tokens in " in line and "stop: length" in line and "drafter draft-model" in line
    assert f"accepted {s.n_accepted}/{s.n_drafted} drafted ({s.acceptance_rate:.1%})" in line
    assert f"{s.mean_tokens_per_step:.2f} tokens/pass" in line and f"prompt {s.n_prompt} tokens" in line
    assert s.n_generated == 40 and 0 < s.n_accepted <= s.n_drafted


def test_non_tty_prints_plain_text_only(tiny: TinyModels):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, "-m", "localspec", "run", "-m", str(tiny.target), "-d", str(tiny.close), "-p", "the cat", "-n", "30", "--temp", "0"]
    res = subprocess.run([*args, "--show-accepted"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0
    assert "\x1b[" not in res.stdout and "tok/s" not in res.stdout
    assert "tok/s" in res.stderr
    quiet = subprocess.run([*args, "--quiet"], capture_output=True, text=True, env=env, timeout=60)
    assert quiet.stdout == res.stdout and quiet.stderr == ""
