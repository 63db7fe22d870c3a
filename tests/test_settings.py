"""The settings record: defaults, validation worded per front end, precedence, and which settings
may change between generations."""

from __future__ import annotations

import pytest

from localspec.cli.options import request
from localspec.config.about import GENERATION, LOAD
from localspec.config.settings import (
    FIELDS,
    PER_GENERATION,
    SettingError,
    Settings,
    parse,
)
from localspec.session.generation import generation_config


def test_defaults_are_valid_and_build_the_engine_config():
    s = Settings()
    s.validate()
    config = generation_config(
        Settings(temp=0.5, draft_max=7, draft_min=2, draft_p_min=0.4, lookup_min=1, stop=("x",))
    )
    assert config.sampling.temperature == 0.5 and config.draft_max == 7 and config.draft_min == 2
    assert config.drafting.p_min == 0.4 and config.drafting.lookup_min == 1 and config.stop == ("x",)


@pytest.mark.parametrize(
    "values,flag,key,api",
    [
        (
            {"draft_max": 0},
            "--draft-max must be in [1, 256]",
            "draft-max must be in [1, 256]",
            "speculative.n_max must be in [1, 256]",
        ),
        (
            {"draft_max": 4, "draft_min": 5},
            "--draft-min must be in [0, --draft-max]",
            "draft-min must be in [0, draft-max]",
            "speculative.n_min must be in [0, speculative.n_max]",
        ),
        (
            {"temp": float("nan")},
            "--temp must be a finite number",
            "temp must be a finite number",
            "temperature must be a finite number",
        ),
        (
            {"draft_mode": "fast"},
            "--draft-mode must be one of auto, fixed, off",
            "draft-mode must be one of auto, fixed, off",
            "speculative.mode must be one of auto, fixed, off",
        ),
        (
            {"seed": -2},
            "--seed must be -1 (random) or in [0, 2^64)",
            "seed must be -1 (random) or in [0, 2^64)",
            "seed must be -1 (random) or in [0, 2^64)",
        ),
    ],
)
def test_an_error_names_the_field_in_each_front_ends_words(values, flag, key, api):
    with pytest.raises(SettingError) as caught:
        Settings().merged(values)
    assert str(caught.value) == flag
    assert caught.value.worded(lambda n: FIELDS[n].key) == key
    assert caught.value.worded(lambda n: FIELDS[n].api or n) == api


def test_every_field_says_when_it_may_change():
    assert set(PER_GENERATION) >= {
        "temp",
        "top_k",
        "top_p",
        "min_p",
        "seed",
        "max_tokens",
        "stop",
        "draft_max",
        "draft_min",
        "draft_p_min",
        "draft_policy",
        "draft_mode",
        "draft_p_split",
        "lookup_min",
        "lookup_max",
    }
    load = {n for n, a in FIELDS.items() if a.phase == LOAD}
    assert load == {
        "parallel",
        "ctx",
        "threads",
        "draft_threads",
        "flash_attn",
        "gpu_layers",
        "draft_gpu_layers",
        "draft_branches",
        "lookup",
        "slots",
        "lookup_method",
        "suffix_cache",
        "suffix_cache_size",
        "datastore",
        "rpc",
        "tensor_split",
        "chat_template",
    }
    assert all(a.phase in (LOAD, GENERATION) for a in FIELDS.values())
    assert all(FIELDS[n].api for n in PER_GENERATION)  # a server can override each per-generation setting


def test_parse_follows_the_field_type():
    assert parse("temp", "0.7") == 0.7 and parse("draft_max", "5") == 5 and parse("seed", "3") == 3
    assert parse("draft_mode", "fixed") == "fixed" and parse("stop", "END") == ("END",)
    with pytest.raises(ValueError):
        parse("draft_max", "many")


def test_flags_over_command_defaults_over_alias_over_built_in(tiny, monkeypatch):
    import localspec.session.loader
    from localspec.session.model_files import ModelFiles

    monkeypatch.setattr(
        localspec.session.model_files,
        "resolve",
        lambda m, d, n: (ModelFiles(tiny.target), {"temp": 0.3, "draft_max": 6, "top_k": 7}),
    )
    files, s = request(
        "alias", None, {"temp": None, "draft_max": 9, "top_k": None}, lambda _m: None, top_k=11
    )
    assert files.model == tiny.target
    assert (s.temp, s.draft_max, s.top_k, s.top_p) == (0.3, 9, 11, Settings().top_p)


def test_every_setting_is_an_option_of_every_command_that_takes_it():
    """One entry in the settings record is one option in run, chat and serve (serve alone takes the
    server's), and in bench unless bench sets it itself; each by the record's flag and short flags."""
    import typer.main

    from localspec.cli.app import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    bench_sets = {
        "top_k",
        "top_p",
        "min_p",
        "seed",
        "stop",
        "draft_mode",
        "lookup",
        "lookup_method",
        "suffix_cache",
        "suffix_cache_size",
        "datastore",
    }
    for command in ("run", "chat", "serve", "bench"):
        opts = {
            name: set(p.opts) | set(p.secondary_opts) for p in commands[command].params for name in [p.name]
        }
        for name, about in FIELDS.items():
            takes = (command == "serve" or not about.server_only) and (
                command != "bench" or name not in bench_sets
            )
            assert (name in opts) == takes, (command, name)
            if takes:
                assert about.flag in opts[name] and set(about.short) <= opts[name], (
                    command,
                    name,
                    opts[name],
                )


def test_a_chat_template_is_checked_as_the_renderer_parses_it():
    # Hugging Face's {% generation %} tag is one llama-cpp-python's formatter knows.
    tagged = "{% for m in messages %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}"
    assert Settings().merged({"chat_template": tagged}).chat_template == tagged
    with pytest.raises(SettingError, match="--chat-template is not a Jinja template"):
        Settings().merged({"chat_template": "{% for m in messages %}"})
