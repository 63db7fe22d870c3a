"""A draft model's window of a long context (drafters/view.py): it reads the sinks and the recent
tokens, so its prompt pass stays bounded; a conversation's next turn evaluates only what is new;
greedy output at length stays the target's own."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from cli_helpers import localspec
from conftest import TinyModels, model_options

from localspec.backend.model import Model
from localspec.config.defaults import DRAFT_SINK_TOKENS
from localspec.drafters.view import TIMED_TOKENS, WARM_TOKENS, DraftView, shown


def test_the_view_is_the_sinks_and_a_tail_whose_cut_moves_in_half_windows():
    context = list(range(5000))
    assert shown(context, 0) == context and shown(context[:1000], 1024) == context[:1000]
    view = shown(context, 1024)
    tail = view[DRAFT_SINK_TOKENS:]
    assert view[:DRAFT_SINK_TOKENS] == context[:DRAFT_SINK_TOKENS] and tail == context[tail[0] :]
    assert 1024 <= len(tail) < 1536 and tail[0] % 512 == 0
    # A conversation's next turns keep the cut until the context has grown by half a window.
    grown = [shown(list(range(n)), 1024)[DRAFT_SINK_TOKENS] for n in range(5000, 5600, 50)]
    assert (
        grown[0] == tail[0]
        and all(b - a in (0, 512) for a, b in zip(grown, grown[1:], strict=False))
        and len(set(grown)) <= 2
    )


@pytest.fixture(scope="module")
def draft(tiny: TinyModels):
    with Model(tiny.close, model_options(4096)) as model:
        yield model


def test_a_windowed_draft_reads_only_its_window_and_a_next_turn_only_what_is_new(draft: Model, monkeypatch):
    evaluated: list[int] = []
    decode = draft.decode
    monkeypatch.setattr(
        draft, "decode", lambda tokens, *a, **k: (evaluated.append(len(tokens)), decode(tokens, *a, **k))[1]
    )
    rng = random.Random(0)
    context = [rng.randrange(260, 300) for _ in range(3000)]
    view = DraftView(draft)
    view.begin(context, 256)
    # A long read starts with a timed part; the rest waits until the draft is first let draft.
    window = shown(context, 256)
    assert draft.cached == window[: WARM_TOKENS + TIMED_TOKENS] and view.token_s > 0
    catch_up = view.catch_up(context)
    assert (
        catch_up is not None
        and catch_up.tokens == view.behind(context) == len(window) - WARM_TOKENS - TIMED_TOKENS
    )
    view.sync(context)
    assert draft.cached == window and sum(evaluated) == len(window) < 400 and view.catch_up(context) is None
    evaluated.clear()
    turn = [*context, *(rng.randrange(260, 300) for _ in range(40))]  # the reply and the next message
    assert view.begin(turn, 256) == 0 and sum(evaluated) == 0  # a short read waits for the first sync
    logits = view.sync([*turn, 270, 271])
    # The new tokens (and the last again), in one pass
    assert draft.cached == [*shown(turn, 256), 270, 271] and np.isfinite(logits).all()
    assert len(evaluated) == 1 and evaluated[0] <= 43


def test_a_draft_reads_a_short_prompt_only_when_first_let_draft_and_heads_at_once(draft: Model):
    prompt = list(range(260, 300))
    view = DraftView(draft)
    draft.truncate(0)
    assert view.begin(prompt) == 0 and draft.cached == []  # the first token does not wait for it
    view.token_s = 0.01  # a long read timed before does not price a short prompt's reading
    assert view.catch_up(prompt) is None
    view.sync(prompt)
    assert draft.cached == prompt and view.token_s == 0.01
    draft.truncate(0)
    assert view.begin(prompt, lazy=False) == len(prompt) and draft.cached == prompt


def test_greedy_output_at_length_is_the_targets_own_with_a_windowed_draft(tiny: TinyModels, tmp_path):
    words = "the cat sat on the mat and the dog ran to the big red house in the sun".split()
    rng = random.Random(1)
    (tmp_path / "long.txt").write_text(" ".join(rng.choice(words) for _ in range(360)))
    common = (
        "run",
        "-m",
        str(tiny.target),
        "-f",
        str(tmp_path / "long.txt"),
        "--raw",
        "--ctx",
        "4096",
        "-n",
        "48",
        "--temp",
        "0",
        "--json",
    )
    res = localspec(*common, "-d", "none", "--no-lookup")
    assert res.returncode == 0, res.stderr
    alone = json.loads(res.stdout)
    assert alone["stats"]["n_prompt"] > 1000
    for window in ("64", "0"):
        res = localspec(*common, "-d", str(tiny.close), "--draft-mode", "fixed", "--draft-window", window)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["stats"]["n_drafted"] > 0 and out["tokens"] == alone["tokens"], window
