"""Text and files from outside the tool, at their worst: markup in every value the CLI echoes,
files nested thousands deep, files without end. Each gets its text printed as it is, or a one-line
error, never a traceback. (The server's bodies: test_server.py; crafted GGUFs: test_gguf_file.py;
a crafted RPC message: test_rpc.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, in_process, localspec
from conftest import TinyModels

MARKUP = ["[/x]", "[bold]", "[/INST]"]  # a closing tag with no opening one raised MarkupError
DEEP = 5000


def _printed(*args: str, env: dict[str, str]) -> str:
    res = in_process(*args, env={"COLUMNS": "250", **env}, catch_exceptions=True)
    assert res.exit_code == 0 and res.exception is None, (args, repr(res.exception), res.output)
    return res.output


@pytest.mark.parametrize("markup", MARKUP)
def test_config_prints_markup_in_a_value_and_a_path_as_text(tmp_path: Path, markup: str):
    env = {"XDG_CONFIG_HOME": str(tmp_path), "LOCALSPEC_STOP": markup}
    out = _printed("config", env=env)
    assert markup in out
    name = f"a{markup.replace('/', '')}b.gguf"
    assert f"model: {tmp_path / name}" in _printed("config", "-m", str(tmp_path / name), env=env)


@pytest.mark.parametrize("markup", MARKUP)
def test_models_prints_markup_in_a_description_and_in_an_alias_error_as_text(tmp_path: Path, markup: str):
    registry = tmp_path / "registry.toml"
    registry.write_text(
        f'[mine]\ndescription = "{markup} my model {markup}"\ntarget = '
        f'{{ repo = "me/model", quant = "Q4_K_M" }}\n\n'
        f'["{markup}"]\ndescription = "bad name"\ntarget = {{ repo = "me/x", quant = "Q4_K_M" }}\n'
    )
    out = _printed(
        "models",
        env={
            "LOCALSPEC_REGISTRY": str(registry),
            "XDG_CONFIG_HOME": str(tmp_path),
            "XDG_DATA_HOME": str(tmp_path),
        },
    )
    assert f"{markup} my model {markup}" in out
    assert f"skipped {registry}: alias '{markup}'" in out


def test_chat_echoes_markup_in_settings_and_file_names_as_text(tiny: TinyModels, tmp_path: Path):
    saved = tmp_path / "a[bold]b[red].json"
    lines = ["/set stop [/INST]", "/set", f"/save {saved}", f"/load {saved}", "/exit"]
    res = localspec(
        "chat",
        "-m",
        str(tiny.target),
        "-n",
        "4",
        input="\n".join(lines) + "\n",
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout.count("[/INST]") >= 2  # as set, and in the list of settings
    assert f"saved to {saved}" in res.stdout and f"loaded 0 messages from {saved}" in res.stdout


def test_bench_prints_markup_in_a_category_and_a_prompt_id_as_text(tiny: TinyModels, tmp_path: Path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        json.dumps({"question_id": "[/x]", "category": "[/INST]", "turns": ["the cat sat"]}) + "\n"
    )
    out = _printed(
        "bench", "-m", str(tiny.target), "--prompts", str(prompts), "-n", "2", "--modes", "ngram", env={}
    )
    assert "[/INST]" in out


def _deep_toml() -> str:
    return "key = " + "[" * DEEP + "]" * DEEP + "\n"


def test_a_registry_or_config_file_nested_thousands_deep_is_refused_in_one_line(
    tiny: TinyModels, tmp_path: Path
):
    deep = tmp_path / "deep.toml"
    deep.write_text(_deep_toml())
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)}
    assert_one_line_error(
        localspec("models", env={**env, "LOCALSPEC_REGISTRY": str(deep)}), "nests too deeply"
    )
    assert_one_line_error(localspec("config", env={**env, "LOCALSPEC_CONFIG": str(deep)}), "nests too deeply")
    inline = tmp_path / "inline.toml"
    inline.write_text("key = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n")
    assert_one_line_error(
        localspec("run", "-m", str(tiny.target), "-p", "x", env={**env, "LOCALSPEC_CONFIG": str(inline)}),
        "nests too deeply",
    )


def test_files_without_end_are_refused_past_the_size_limit(tiny: TinyModels, tmp_path: Path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    assert_one_line_error(
        localspec("config", env={**env, "LOCALSPEC_CONFIG": "/dev/zero"}), "larger than 16 MB"
    )
    assert_one_line_error(
        localspec("run", "-m", str(tiny.target), "-f", "/dev/zero", env=env), "larger than 16 MB"
    )
    assert_one_line_error(
        localspec("run", "-m", str(tiny.target), "-p", "x", "--grammar", "/dev/zero", env=env),
        "larger than 16 MB",
    )


def test_chat_refuses_a_saved_conversation_nested_deep_or_without_end_and_goes_on(
    tiny: TinyModels, tmp_path: Path
):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * DEEP + "]" * DEEP)
    surrogate = tmp_path / "surrogate.json"
    surrogate.write_text(
        '{"messages": [{"role": "user", "content": "hi \\ud800"}, {"role": "assistant", "content": "yes"}]}'
    )
    lines = [f"/load {deep}", "/load /dev/zero", f"/load {surrogate}", "say more", "/exit"]
    res = localspec(
        "chat",
        "-m",
        str(tiny.target),
        "-n",
        "3",
        "--temp",
        "0",
        input="\n".join(lines) + "\n",
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr
    assert (
        "Traceback" not in res.stderr
        and "RecursionError" not in res.stderr
        and "MemoryError" not in res.stderr
    )
    assert f"error: {deep} is not a saved conversation" in res.stderr
    assert "error: conversation /dev/zero is larger than 16 MB" in res.stderr
    assert f"loaded 2 messages from {surrogate}" in res.stdout


def test_a_name_too_long_for_a_path_is_one_line(tiny: TinyModels, tmp_path: Path):
    long = "a" * 300  # over NAME_MAX: Path.exists raises rather than answering
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    assert_one_line_error(localspec("run", "-m", f"{long}.gguf", "-p", "x", env=env), "File name too long")
    assert_one_line_error(
        localspec("run", "-m", str(tiny.target), "-d", str(tmp_path / f"{long}.gguf"), "-p", "x", env=env),
        "File name too long",
    )
    assert_one_line_error(localspec("config", "-m", long, env=env), f"unknown model alias '{long}'")
    assert_one_line_error(
        localspec("config", env={**env, "LOCALSPEC_CONFIG": str(tmp_path / long)}), "File name too long"
    )
