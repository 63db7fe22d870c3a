"""Decode costs: the catch-up a lagging draft pays, the cost cache, and the draft's catch-up window."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import TinyModels, model_options

from localspec.backend.model import Model
from localspec.drafters.view import DraftView
from localspec.engine.costs import CACHE_VERSION, MAX_CATCH_UP, CostCache, DecodeCosts, pair_costs


def test_a_lagging_draft_pays_for_what_it_missed_up_to_the_catch_up_window():
    c = DecodeCosts({1: 1.0}, draft_token={"draft-model": 0.1}, draft_catch_up={"draft-model": 0.05}, draft_behind={"draft-model": 0.02})
    assert c.draft("draft-model", 3) == pytest.approx(0.35)
    assert c.draft("draft-model", 3, behind=2) == pytest.approx(0.35)  # the usual two tokens
    assert c.draft("draft-model", 3, behind=10) == pytest.approx(0.35 + 8 * 0.02)
    assert c.draft("draft-model", 3, behind=500) == c.draft("draft-model", 3, behind=MAX_CATCH_UP)
    assert c.draft("draft-model", 0, behind=500) == 0.0


def test_costs_are_measured_once_and_stale_entries_pruned(tiny: TinyModels, tmp_path):
    path = tmp_path / "costs.json"
    gone = tmp_path / "deleted.gguf"
    path.write_text(json.dumps({f"v{CACHE_VERSION}|{gone}|1|2": {"near": {"1": 1.0}}, "v1|old": {}}))
    target_file, draft_file = tmp_path / "t.gguf", tmp_path / "d.gguf"
    shutil.copy(tiny.target, target_file)
    shutil.copy(tiny.close, draft_file)
    with Model(target_file, model_options()) as target, Model(draft_file, model_options()) as draft:
        first = pair_costs(target, draft, 4, CostCache(path))
        entries = json.loads(path.read_text())
        assert len(entries) == 2 and all(str(target_file) in k for k in entries)  # target + pair
        assert first.near.keys() == {1, 2, 3, 4, 5} and first.far_context > 0
        assert first.draft_behind["draft-model"] >= 0.0 and first.draft_token["draft-model"] > 0.0
        again = pair_costs(target, draft, 4, CostCache(path))
        assert again == first  # read back, not measured anew
    draft_file.unlink()
    with Model(target_file, model_options()) as target:
        pair_costs(target, None, 6, CostCache(path))  # larger batches: measured, and the file rewritten
    assert list(json.loads(path.read_text())) == [k for k in entries if not k.startswith("pair")]


def test_a_draft_that_sat_out_catches_up_on_the_newest_tokens_only(tiny: TinyModels):
    with Model(tiny.close, model_options()) as m:
        view = DraftView(m)
        prompt = list(range(10, 20))
        view.begin(prompt)
        generated = list(range(100, 140))
        view.sync(prompt + generated, window=4)
        assert m.cached == prompt + generated[-4:]  # a hole where the draft sat out
        view.sync(prompt + generated + [7, 8], window=4)
        assert m.cached == prompt + generated[-4:] + [7, 8]  # later steps continue after the hole
        view.begin(prompt + [1])  # a new generation starts over from the real context
        assert m.cached == prompt + [1]
