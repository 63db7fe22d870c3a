"""Property-based: whatever numbers, bytes or files a user gives, the command line answers with exit
code 0, 1 or 2 and a message, never a traceback. Bounded so that no example can exhaust the machine
(contexts up to the tiny models' training context, a few threads, a few tokens)."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import pytest
from cli_helpers import in_process
from conftest import TinyModels
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Derandomized: the same examples on every run, so that a run of CI never fails on a new draw alone.
EXAMPLES = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
CACHE = tempfile.mkdtemp(prefix="localspec-props-")

floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, 1.0, -1.0, 0.5, math.nan, math.inf])
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
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
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
        invoke("models", "--json", env={"LOCALSPEC_REGISTRY": str(path), "XDG_CONFIG_HOME": d, "XDG_DATA_HOME": d})


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
@given(st.sampled_from(["LOCALSPEC_DRAFT_MAX", "LOCALSPEC_TEMP", "LOCALSPEC_THREADS", "LOCALSPEC_LOOKUP", "LOCALSPEC_STOP",
                        "LOCALSPEC_DRAFT_MODE", "LOCALSPEC_NOSUCH", "LOCALSPEC_DRAFT"]),
       st.text(max_size=12).filter(lambda t: "\x00" not in t))
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
