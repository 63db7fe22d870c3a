"""Property-based: whatever numbers, bytes or files a user gives, the command line answers with exit
code 0, 1 or 2 and a message, never a traceback. Bounded so that no example can exhaust the machine
(contexts up to the tiny models' training context, a few threads, a few tokens)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from cli_helpers import in_process, localspec
from conftest import TinyModels
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import Served, call, start

# Derandomized: the same examples on every run, so that a run of CI never fails on a new draw alone.
EXAMPLES = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
CACHE = tempfile.mkdtemp(prefix="localspec-props-")

floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, 1.0, -1.0, 0.5, math.nan, math.inf]
)
NUMERIC = {
    "--draft-max": st.integers(-5, 300),
    "--draft-min": st.integers(-3, 20),
    "--temp": floats,
    "--top-k": st.integers(-5, 400),
    "--top-p": floats,
    "--min-p": floats,
    "--ctx": st.integers(-10, 2048),
    "--threads": st.integers(-1, 3),
    "--draft-p-min": floats,
    "--draft-p-split": floats,
    "--lookup-min": st.integers(-1, 8),
    "--lookup-max": st.integers(-1, 8),
    "--seed": st.integers(-5, 2**64 + 5),
    "-n": st.integers(-2, 6),
    "--draft-branches": st.integers(-1, 5),
    "--draft-mode": st.sampled_from(["auto", "fixed", "", "AUTO", "none"]),
}


def invoke(*args: str, env: dict[str, str] | None = None):
    result = in_process(*args, env={"XDG_CACHE_HOME": CACHE, **(env or {})})
    output = result.output
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        repr(result.exception),
    )
    assert "Traceback" not in output, output
    return result


# Values inside the bounds, at their edges: these must run, whatever their mix.
VALID = {
    "--draft-max": st.sampled_from([1, 2, 16, 256]),
    "--draft-min": st.sampled_from([0, 1]),
    "--temp": st.sampled_from([0.0, 1e-6, 0.8, 5.0]),
    "--top-k": st.sampled_from([0, 1, 400]),
    "--top-p": st.sampled_from([1e-6, 0.5, 1.0]),
    "--min-p": st.sampled_from([0.0, 0.999]),
    "--ctx": st.sampled_from([0, 1, 256, 2048]),
    "--draft-p-min": st.sampled_from([0.0, 1.0]),
    "--draft-p-split": st.sampled_from([0.0, 1.0]),
    "--seed": st.sampled_from([-1, 0, 2**64 - 1]),
    "--draft-branches": st.sampled_from([1, 2, 4]),
    "--draft-mode": st.sampled_from(["auto", "fixed"]),
    "--draft-policy": st.sampled_from(["sample", "greedy"]),
}


@EXAMPLES
@given(st.fixed_dictionaries({}, optional=NUMERIC))
def test_any_numbers_in_the_options(tiny: TinyModels, options: dict):
    args = [a for flag, value in options.items() for a in (flag, str(value))]
    invoke("run", "-m", str(tiny.target), "-d", str(tiny.close), "-p", "the cat", "-n", "4", *args)


@EXAMPLES
@given(st.fixed_dictionaries({}, optional=VALID))
def test_numbers_at_the_edges_of_their_bounds_run(tiny: TinyModels, options: dict):
    args = [a for flag, value in options.items() for a in (flag, str(value))]
    result = invoke("run", "-m", str(tiny.target), "-d", str(tiny.close), "-p", "the cat", "-n", "4", *args)
    assert result.exit_code == 0, (args, result.output)


@EXAMPLES
@given(st.binary(max_size=200).filter(lambda b: b"\x00" not in b))
def test_any_bytes_in_the_prompt(tiny: TinyModels, data: bytes):
    prompt = os.fsdecode(data) or "x"  # as the OS hands undecodable argv bytes to Python
    invoke("run", "-m", str(tiny.target), "-p", prompt, "-n", "3", "--temp", "0")


@EXAMPLES
@given(st.binary(max_size=400))
def test_any_bytes_in_a_registry_file(data: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "registry.toml"
        path.write_bytes(data)
        invoke(
            "models",
            "--json",
            env={"LOCALSPEC_REGISTRY": str(path), "XDG_CONFIG_HOME": d, "XDG_DATA_HOME": d},
        )


@pytest.mark.parametrize("valid_json", [False, True])
@EXAMPLES
@given(data=st.binary(max_size=300))
def test_any_bytes_in_a_bench_prompt_file(tiny: TinyModels, valid_json: bool, data: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "prompts.jsonl"
        if valid_json:
            text = data.decode("utf-8", "replace").replace("\\", "").replace('"', "")
            path.write_text(f'{{"question_id": 1, "category": "x", "turns": ["{text}"]}}\n', encoding="utf-8")
        else:
            path.write_bytes(data)
        invoke("bench", "-m", str(tiny.target), "--prompts", str(path), "-n", "2", "--modes", "ngram")


@EXAMPLES
@given(st.binary(max_size=300))
def test_any_bytes_in_a_config_file(tiny: TinyModels, data: bytes):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.toml"
        path.write_bytes(data)
        invoke("run", "-m", str(tiny.target), "-p", "the cat", "-n", "2", env={"LOCALSPEC_CONFIG": str(path)})
        invoke("config", "--json", env={"LOCALSPEC_CONFIG": str(path)})


@EXAMPLES
@given(
    st.sampled_from(
        [
            "LOCALSPEC_DRAFT_MAX",
            "LOCALSPEC_TEMP",
            "LOCALSPEC_THREADS",
            "LOCALSPEC_LOOKUP",
            "LOCALSPEC_STOP",
            "LOCALSPEC_DRAFT_MODE",
            "LOCALSPEC_NOSUCH",
            "LOCALSPEC_DRAFT",
        ]
    ),
    st.text(max_size=12).filter(lambda t: "\x00" not in t),
)
def test_any_text_in_a_localspec_variable(tiny: TinyModels, var: str, value: str):
    invoke("run", "-m", str(tiny.target), "-p", "the cat", "-n", "2", env={var: value})


@EXAMPLES
@given(st.binary(max_size=200).filter(lambda b: b"\x00" not in b), st.booleans())
def test_any_bytes_as_a_positional_prompt_or_a_prompt_file(tiny: TinyModels, data: bytes, as_file: bool):
    if as_file:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "prompt.txt"
            path.write_bytes(data)
            invoke("run", "-m", str(tiny.target), "-f", str(path), "-n", "2", "--temp", "0")
    else:
        invoke("run", "-m", str(tiny.target), os.fsdecode(data) or "x", "-n", "2", "--temp", "0")


# Text at its most hostile: Rich markup (a closing tag with no opening one raised), TOML and JSON
# punctuation, a lone surrogate (not Unicode: written as invalid UTF-8 or as a JSON escape), and
# nesting thousands deep (RecursionError in the parsers).
PIECES = [
    "[/x]",
    "[bold]",
    "[/INST]",
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    "=",
    '"',
    "\\",
    "\n",
    " ",
    "a",
    "é",
    "\ud800",
    "[" * 3000,
    "{a = " * 1500,
    '{"a": ' * 3000,
]
hostile = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)
HOSTILE_EXAMPLES = settings(EXAMPLES, max_examples=20)


def _toml_string(text: str) -> str:
    return json.dumps(text)  # TOML's basic strings share JSON's escapes (a surrogate escape is refused)


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    return path


@HOSTILE_EXAMPLES
@given(hostile, hostile)
def test_hostile_text_in_a_registry_printed_as_a_table(raw: str, description: str):
    with tempfile.TemporaryDirectory() as d:
        env = {"XDG_CONFIG_HOME": d, "XDG_DATA_HOME": d}
        invoke("models", env={**env, "LOCALSPEC_REGISTRY": str(_write(Path(d) / "raw.toml", raw))})
        entry = (
            f"[mine]\ndescription = {_toml_string(description)}\ntarget = "
            f'{{ repo = "me/m", quant = "Q4_K_M" }}\n'
        )
        result = invoke(
            "models",
            env={**env, "COLUMNS": "400", "LOCALSPEC_REGISTRY": str(_write(Path(d) / "entry.toml", entry))},
        )
        if "\ud800" not in description and len(description) < 200:
            assert result.exit_code == 0 and "mine" in result.output, result.output


@HOSTILE_EXAMPLES
@given(hostile, hostile)
def test_hostile_text_in_a_config_file_printed_as_a_table(raw: str, stop: str):
    with tempfile.TemporaryDirectory() as d:
        invoke(
            "config", env={"XDG_CONFIG_HOME": d, "LOCALSPEC_CONFIG": str(_write(Path(d) / "raw.toml", raw))}
        )
        entry = _write(Path(d) / "stop.toml", f"stop = [{_toml_string(stop)}]\n")
        result = invoke("config", env={"XDG_CONFIG_HOME": d, "LOCALSPEC_CONFIG": str(entry)})
        if "\ud800" not in stop and stop.strip():
            assert result.exit_code == 0, result.output
        invoke(
            "config",
            env={
                "XDG_CONFIG_HOME": d,
                "LOCALSPEC_CONFIG": str(_write(Path(d) / "model.toml", f"model = {_toml_string(stop)}\n")),
            },
        )
        invoke("config", "-m", stop or "x", env={"XDG_CONFIG_HOME": d})


@settings(EXAMPLES, max_examples=8)
@given(st.lists(hostile, min_size=3, max_size=3))
def test_hostile_saved_chats_load_or_are_refused_in_one_line(tiny: TinyModels, texts: list[str]):
    with tempfile.TemporaryDirectory() as d:
        raw = _write(Path(d) / "raw.json", texts[0])
        shaped = _write(
            Path(d) / "shaped.json",
            json.dumps({"system": texts[1], "messages": [{"role": "user", "content": texts[2]}]}),
        )
        nested = _write(
            Path(d) / "nested.json",
            json.dumps({"messages": [{"role": "user", "content": texts[1]}]})[:-2] + texts[2],
        )
        lines = [f"/load {raw}", f"/load {nested}", f"/load {shaped}", "go on", "/exit"]
        res = localspec(
            "chat",
            "-m",
            str(tiny.target),
            "-n",
            "2",
            "--temp",
            "0",
            input="\n".join(lines) + "\n",
            env={**os.environ, "XDG_STATE_HOME": d, "XDG_CACHE_HOME": CACHE},
        )
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        assert (
            f"loaded 1 messages from {shaped}" in res.stdout
            or "deeply" in res.stderr
            or "not a saved conversation" in res.stderr
        ), (res.stdout, res.stderr)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2**70) | st.floats() | hostile,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            hostile | st.sampled_from(["role", "content", "max_tokens", "n"]), inner, max_size=4
        )
    ),
    max_leaves=12,
)
chat_bodies = st.fixed_dictionaries(
    {
        "messages": st.lists(
            st.fixed_dictionaries(
                {
                    "role": st.sampled_from(["user", "system", "assistant", "tool"]) | hostile,
                    "content": json_values,
                }
            ),
            max_size=3,
        )
    },
    optional={
        "max_tokens": st.integers(-1, 3),
        "temperature": st.sampled_from([0, 0.7]),
        "stop": json_values,
        "tools": json_values,
        "response_format": json_values,
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(-1, 30),
        "seed": st.integers(-1, 2**65),
    },
)


@pytest.fixture(scope="module")
def tiny_served(tiny: TinyModels):
    s = start("-m", str(tiny.target), "--ctx", "256", "--max-tokens", "3")
    yield s
    assert s.stop() == 0, "".join(s.log)


@HOSTILE_EXAMPLES
@given(st.one_of(chat_bodies, json_values), st.booleans())
def test_hostile_request_bodies_get_an_answer_never_a_500(tiny_served: Served, body, stream: bool):
    if isinstance(body, dict) and stream:
        body = {**body, "stream": True}
    since = len(tiny_served.log)
    for path in ("/v1/chat/completions", "/v1/completions"):
        status, out, _ = call(tiny_served, "POST", path, raw=json.dumps(body).encode())
        assert status in (200, 400, 413), (status, out)
    assert call(tiny_served, "GET", "/health")[0] == 200
    assert not [
        line for line in tiny_served.log[since:] if "Traceback" in line or "internal error" in line
    ], "".join(tiny_served.log[since:])
