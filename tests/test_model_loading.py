"""Loading both models: on a CPU the draft loads on a thread of its own beside the target, with the
context the target gets; a load that fails on either side closes what the other loaded and says
why; where llama.cpp sizes the target's context otherwise than its file implied, the draft is
loaded again to fit."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from conftest import TinyModels

from localspec.backend.model import Model
from localspec.backend.side_load import SideLoad
from localspec.config.settings import Settings
from localspec.errors import LocalspecError
from localspec.session import model_loading
from localspec.session.model_files import ModelFiles
from localspec.session.model_loading import load_models


class _Closable:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_a_side_load_hands_over_its_model_or_raises_its_error():
    made = _Closable()
    assert SideLoad(lambda: made).result() is made  # type: ignore[arg-type,return-value]

    def fail() -> Model:
        raise LocalspecError("no such draft")

    with pytest.raises(LocalspecError, match="no such draft"):
        SideLoad(fail).result()
    other = _Closable()
    SideLoad(lambda: other).discard()  # type: ignore[arg-type,return-value]
    assert other.closed


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """The models the loads made, in order, and the side loads started."""
    seen: dict[str, list] = {"models": [], "sides": []}
    make, side = model_loading._model, model_loading.SideLoad

    def recorded(path: Path, *args) -> Model:
        seen["models"].append(model := make(path, *args))
        return model

    def started(*args) -> SideLoad:
        seen["sides"].append(s := side(*args))
        return s

    monkeypatch.setattr(model_loading, "_model", recorded)
    monkeypatch.setattr(model_loading, "SideLoad", started)
    return seen


@pytest.mark.parametrize("settings", [Settings(), Settings(ctx=300)])
def test_the_draft_loads_beside_the_target_with_its_context(tiny: TinyModels, loads, settings):
    target, draft, waited = load_models(ModelFiles(tiny.target, tiny.close), settings, threading.Event())
    try:
        assert len(loads["sides"]) == 1 and len(loads["models"]) == 2
        assert draft is not None and draft.n_ctx == target.n_ctx
        assert waited >= 0.0 and (target.n_ctx == 512 if settings.ctx else target.n_ctx >= 256)
    finally:
        target.close()
        draft.close()  # type: ignore[union-attr]


def test_a_servers_lanes_each_get_the_context_asked_for(tiny: TinyModels, loads):
    settings = Settings(ctx=256).merged({"parallel": 2})
    target, draft, _ = load_models(
        ModelFiles(tiny.target, tiny.close), settings, threading.Event(), serving=True
    )
    try:
        assert target.options.lanes == 2 and target.n_ctx == 512
        assert draft is not None and draft.n_ctx == 512 and len(loads["models"]) == 2
    finally:
        target.close()
        draft.close()  # type: ignore[union-attr]


def test_a_target_context_other_than_its_file_implied_loads_the_draft_again(tiny, loads, monkeypatch):
    monkeypatch.setattr(model_loading, "context_tokens", lambda asked, train: 256)
    target, draft, _ = load_models(ModelFiles(tiny.target, tiny.close), Settings(ctx=600), threading.Event())
    try:
        first = loads["models"][1] if loads["models"][0] is target else loads["models"][0]
        assert first.ctx is None  # the draft loaded beside at 256 tokens, closed
        assert draft is not None and draft.n_ctx == target.n_ctx == 768 and len(loads["models"]) == 3
    finally:
        target.close()
        draft.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("failing", ["target", "draft"])
def test_a_failed_load_on_either_side_closes_the_other(tiny: TinyModels, loads, monkeypatch, failing):
    make, made = model_loading._model, []
    bad = tiny.target if failing == "target" else tiny.close

    def load(path: Path, *args) -> Model:
        made.append(model := make(path, *args))  # loaded, then failing: the other side's is closed too
        if path == bad:
            raise LocalspecError(f"could not load the {failing}")
        return model

    monkeypatch.setattr(model_loading, "_model", load)
    with pytest.raises(LocalspecError, match=f"could not load the {failing}"):
        load_models(ModelFiles(tiny.target, tiny.close), Settings(), threading.Event())
    assert len(loads["sides"]) == 1 and len(made) == 2
    good = next(m for m in made if m.path != bad)
    assert good.ctx is None and good.model is None
    for m in made:
        m.close()


def test_without_a_draft_nothing_loads_beside(tiny: TinyModels, loads):
    target, draft, waited = load_models(ModelFiles(tiny.target), Settings(), threading.Event())
    with target:
        assert draft is None and waited == 0.0 and loads["sides"] == []
