"""What a new user meets in the first minutes, through the real CLI: ollama's habits (a model named
where the prompt goes, `list`, `ps`), and labels that say what is true in plain words."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, localspec
from conftest import TinyModels

from localspec.cli.pull import described


@pytest.fixture
def fresh(tmp_path: Path) -> dict[str, str]:
    """An environment with nothing pulled, configured or cached."""
    return {
        **os.environ,
        **{f"XDG_{d}_HOME": str(tmp_path / d.lower()) for d in ("CONFIG", "DATA", "CACHE", "STATE")},
    }


def test_a_shipped_alias_where_the_prompt_goes_is_taken_as_the_model(fresh):
    # ollama's `run MODEL`: not sent to the demo model as a prompt.
    alone = localspec("run", "llama3.1-8b", "-n", "5", input="", env=fresh)
    assert_one_line_error(alone, "no prompt for llama3.1-8b: give it after the model")
    with_prompt = localspec("run", "llama3.1-8b", "Why is the sky blue?", "-n", "5", env=fresh)
    assert_one_line_error(
        with_prompt, "llama3.1-8b is not pulled: run `localspec pull llama3.1-8b` first", alone=False
    )
    both = localspec("run", "-m", "qwen3-32b", "llama3.1-8b", "-n", "5", env=fresh)
    line = assert_one_line_error(both, "'llama3.1-8b' names a model, and -m names 'qwen3-32b'")
    assert "-p" in line  # how to send it as text


def test_a_gguf_where_the_prompt_goes_is_the_model_and_the_rest_the_prompt(tiny: TinyModels, fresh):
    args = ("-n", "6", "--temp", "0", "--json", "-d", "none", "--no-lookup")
    first = json.loads(localspec("run", str(tiny.target), "the cat", *args, env=fresh).stdout)
    usual = json.loads(localspec("run", "-m", str(tiny.target), "the cat", *args, env=fresh).stdout)
    assert first["model_files"]["target"] == str(tiny.target) and first["tokens"] == usual["tokens"]
    # Words that name no model are the prompt, joined, as ollama joins them.
    assert (
        json.loads(localspec("run", "-m", str(tiny.target), "the", "cat", *args, env=fresh).stdout)["tokens"]
        == usual["tokens"]
    )


def test_ollamas_list_ls_and_ps(fresh):
    listed = localspec("list", "--json", env=fresh)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == json.loads(localspec("models", "--json", env=fresh).stdout)
    assert localspec("ls", env=fresh).stdout == localspec("models", env=fresh).stdout
    ps = localspec("ps", env=fresh)
    assert ps.returncode == 2
    assert "`localspec models` lists what is pulled" in assert_one_line_error(ps, "no command 'ps'")
    assert "`localspec rm ALIAS`" in assert_one_line_error(localspec("delete", "x", env=fresh))


def test_pull_states_an_aliases_facts_in_words():
    assert (
        described({"license": "llama3.1", "gated": False, "memory_gb": 7})
        == "license llama3.1 · not gated · needs ~7 GB of memory"
    )
    assert described({"gated": True}) == "gated: accept its terms on the Hub first"
    assert described({}) == ""


def test_config_names_what_the_demo_runs(fresh):
    out = json.loads(localspec("config", "--json", env=fresh).stdout)
    # The F32 made from the shipped Q4_1 is the target; the Q4_1 drafts it.
    assert ".F32-" in Path(out["model"]["value"]).name and "F32, made on first use" in out["model"]["about"]
    assert out["draft"]["value"].endswith("Q4_1.gguf")


@pytest.mark.parametrize("columns", [80, 100, 140])
def test_help_lines_wrap_whole(columns: int):
    """Each command's description in `localspec --help` fills its rows before it breaks: no row
    ends where the docstring's source line did while the next word would have fitted."""
    shown = localspec("--help", env={**os.environ, "COLUMNS": str(columns)}).stdout
    panel = shown.split("Commands")[1]
    rows = [line for line in panel.splitlines() if line.startswith("│")]
    descriptions: list[list[str]] = []
    for row in rows:
        name, text = re.match(r"│ (\S*)\s+(.*?)\s*│$", row).groups()  # type: ignore[union-attr]
        if name:
            descriptions.append([text])
        else:
            descriptions[-1].append(text)
    width = max(len(re.match(r"│ \S+\s+(.*)│$", r)[1]) for r in rows if re.match(r"│ \S", r))  # type: ignore[index]
    assert len(descriptions) >= 10
    for description in descriptions:
        for row, after in zip(description, description[1:], strict=False):
            assert len(row) + 1 + len(after.split()[0]) > width - 1, (row, after)
