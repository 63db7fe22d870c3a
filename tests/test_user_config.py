"""Defaults from the config file and LOCALSPEC_* variables, and their precedence."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, localspec
from conftest import TinyModels

from localspec.config.user_config import layered, read_config, read_env
from localspec.errors import LocalspecError


def test_a_config_file_names_a_model_and_settings(tmp_path: Path):
    path = tmp_path / "config.toml"
    path.write_text('model = "/models/t.gguf"\nthreads = 4\ndraft_max = 8\nstop = ["###"]\ntemp = 1\n')
    d = read_config(path)
    assert d.model == "/models/t.gguf" and d.draft is None
    assert d.settings == {"threads": 4, "draft_max": 8, "stop": ("###",), "temp": 1}
    assert read_config(tmp_path / "none.toml").settings == {}  # no file: no defaults


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("draft_max = ", "is not valid TOML"),
        ("drafts = 3", "'drafts' is not a setting"),
        ("draft_max = 'eight'", "draft_max must be an integer"),
        ("lookup = 1", "lookup must be true or false"),
        ("draft_max = 0", "draft_max must be in [1, 256]"),
        ("model = 3", "model must be a file path or an alias"),
    ],
)
def test_a_bad_config_file_is_one_clear_error(tmp_path: Path, text: str, fragment: str):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(LocalspecError, match="config file") as e:
        read_config(path)
    assert fragment in str(e.value)


def test_variables_name_a_model_and_settings_and_bad_ones_are_errors():
    d = read_env(
        {
            "LOCALSPEC_MODEL": "m.gguf",
            "LOCALSPEC_THREADS": "3",
            "LOCALSPEC_LOOKUP": "off",
            "LOCALSPEC_REGISTRY": "x",
            "PATH": "/bin",
        }
    )
    assert d.model == "m.gguf" and d.settings == {"threads": 3, "lookup": False}
    for env, fragment in (
        ({"LOCALSPEC_THREADS": "many"}, "LOCALSPEC_THREADS='many': must be an integer"),
        ({"LOCALSPEC_DRAFTMAX": "3"}, "LOCALSPEC_DRAFTMAX is not a setting"),
        ({"LOCALSPEC_TOP_P": "2"}, "LOCALSPEC_TOP_P must be in (0, 1]"),
    ):
        with pytest.raises(LocalspecError, match="LOCALSPEC_") as e:
            read_env(env)
        assert fragment in str(e.value)


def test_layers_lowest_first_say_where_each_value_came_from():
    values = layered([("config file", {"threads": 4, "temp": 0.5}), ("environment", {"temp": 0.7})])
    assert values["threads"] == (4, "config file") and values["temp"] == (0.7, "environment")
    assert values["draft_max"] == (16, "built-in")


def test_precedence_flag_over_environment_over_config_file(tiny: TinyModels, tmp_path: Path):
    config = tmp_path / "config.toml"
    config.write_text(f'model = "{tiny.target}"\ndraft = "{tiny.close}"\ndraft_max = 3\ntemp = 0.0\n')
    env = {**os.environ, "LOCALSPEC_CONFIG": str(config)}

    def run(*args: str, **extra: str) -> dict:
        res = localspec("run", "-p", "the cat", "-n", "4", "--json", *args, env={**env, **extra})
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    out = run()  # no -m: the config file's model and draft
    assert (
        out["model_files"] == {"target": str(tiny.target), "draft": str(tiny.close)}
        and out["settings"]["draft_max"] == 3
    )
    assert run(LOCALSPEC_DRAFT_MAX="5")["settings"]["draft_max"] == 5
    assert run("--draft-max", "2", LOCALSPEC_DRAFT_MAX="5")["settings"]["draft_max"] == 2
    shown = localspec("config", "--json", env={**env, "LOCALSPEC_TEMP": "0.3"})
    assert shown.returncode == 0, shown.stderr
    table = json.loads(shown.stdout)
    assert table["model"] == {"value": str(tiny.target), "from": "config file", "about": None}
    assert table["settings"]["draft_max"] == {"value": 3, "from": "config file"}
    assert table["settings"]["temp"] == {"value": 0.3, "from": "environment"}
    assert table["settings"]["top_k"]["from"] == "built-in"
    bad = localspec("run", "-p", "x", env={**env, "LOCALSPEC_DRAFT_MAX": "zero"})
    assert bad.returncode == 1 and bad.stderr.startswith("error: LOCALSPEC_DRAFT_MAX")
    assert_one_line_error(bad)
