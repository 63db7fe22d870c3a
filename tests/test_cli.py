"""`localspec run` through a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pexpect
import pytest
from cli_helpers import CLI, assert_one_line_error, in_terminal, localspec
from conftest import TinyModels


def test_json_output_fields(tiny: TinyModels):
    res = localspec(
        "run",
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "-p",
        "the cat",
        "-n",
        "40",
        "--temp",
        "0",
        "--draft-max",
        "4",
        "--draft-mode",
        "fixed",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out) >= {"text", "tokens", "stop_reason", "stats", "version", "model_files", "settings"}
    assert out["model_files"] == {"target": str(tiny.target), "draft": str(tiny.close)}
    assert out["settings"]["draft_max"] == 4 and out["settings"]["draft_mode"] == "fixed"
    assert out["stop_reason"] == "length"
    assert len(out["tokens"]) == 40
    s = out["stats"]
    for key in (
        "n_prompt",
        "n_generated",
        "n_drafted",
        "n_accepted",
        "acceptance_rate",
        "tokens_per_second",
        "elapsed_s",
        "prompt_tokens_per_second",
        "load_s",
        "drafter",
        "drafters",
    ):
        assert key in s, key
    assert s["drafter"] == "draft+lookup"
    assert s["n_generated"] == 40
    assert s["n_drafted"] > 0 and 0 < s["n_accepted"] <= s["n_drafted"]
    assert s["acceptance_rate"] == pytest.approx(s["n_accepted"] / s["n_drafted"], abs=1e-5)
    assert s["drafters"]["draft-model"] == {"drafted": s["n_drafted"], "accepted": s["n_accepted"]}
    assert s["tokens_per_second"] > 0 and s["load_s"] > 0


def test_greedy_cli_matches_target_alone(tiny: TinyModels):
    base = json.loads(
        localspec(
            "run",
            "-m",
            str(tiny.target),
            "-d",
            "none",
            "--no-lookup",
            "-p",
            "a dog",
            "-n",
            "30",
            "--temp",
            "0",
            "--json",
        ).stdout
    )
    spec = json.loads(
        localspec(
            "run",
            "-m",
            str(tiny.target),
            "-d",
            str(tiny.poor),
            "-p",
            "a dog",
            "-n",
            "30",
            "--temp",
            "0",
            "--draft-mode",
            "fixed",
            "--json",
        ).stdout
    )
    assert base["stats"]["drafter"] == "none" and base["stats"]["acceptance_rate"] == 0.0
    assert spec["stats"]["n_drafted"] > 0
    assert spec["tokens"] == base["tokens"] and spec["text"] == base["text"]


def test_no_draft_defaults_to_ngram_and_lookup_chains(tiny: TinyModels):
    ngram = json.loads(
        localspec(
            "run", "-m", str(tiny.target), "-p", "the cat sat", "-n", "30", "--temp", "0", "--json"
        ).stdout
    )
    assert ngram["stats"]["drafter"] == "ngram"
    chain = json.loads(
        localspec(
            "run",
            "-m",
            str(tiny.target),
            "-d",
            str(tiny.close),
            "--lookup",
            "--draft-mode",
            "fixed",
            "-p",
            "the cat sat",
            "-n",
            "60",
            "--temp",
            "0",
            "--json",
        ).stdout
    )
    assert chain["stats"]["drafter"] == "chain"
    assert (
        chain["tokens"]
        == json.loads(
            localspec(
                "run",
                "-m",
                str(tiny.target),
                "--no-lookup",
                "-p",
                "the cat sat",
                "-n",
                "60",
                "--temp",
                "0",
                "--json",
            ).stdout
        )["tokens"]
    )
    assert sum(v["drafted"] for v in chain["stats"]["drafters"].values()) == chain["stats"]["n_drafted"]


def test_seed_reproducible_from_cli(tiny: TinyModels):
    args = ("run", "-m", str(tiny.target), "-p", "moon", "-n", "30", "--temp", "1", "--seed", "7", "--json")
    # Standard verification repeats in fixed mode; coupled with any drafting, auto included, or none.
    fixed = (*args, "-d", str(tiny.poor), "--draft-mode", "fixed")
    a, b = json.loads(localspec(*fixed).stdout), json.loads(localspec(*fixed).stdout)
    assert a["tokens"] == b["tokens"] and a["seed"] == 7
    coupled = [
        json.loads(localspec(*args, *extra, "--verify", "coupled").stdout)["tokens"]
        for extra in (
            ("-d", str(tiny.poor)),
            ("-d", str(tiny.close), "--draft-max", "3"),
            ("-d", "none", "--no-lookup"),
        )
    ]
    assert coupled[0] == coupled[1] == coupled[2]


def test_a_seed_given_repeats_at_temp_above_zero_under_auto(tiny: TinyModels):
    """An explicit --seed makes verification coupled, so auto's timing-driven draft lengths cannot
    change the text; --verify standard, given, is kept."""
    args = (
        "run",
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "-p",
        "the cat",
        "-n",
        "40",
        "--temp",
        "0.8",
        "--seed",
        "7",
        "--json",
    )
    runs = [json.loads(localspec(*args).stdout) for _ in range(2)]
    assert runs[0]["tokens"] == runs[1]["tokens"]
    assert runs[0]["settings"]["verify"] == "coupled" and runs[0]["settings"]["draft_mode"] == "auto"
    assert json.loads(localspec(*args, "--verify", "standard").stdout)["settings"]["verify"] == "standard"
    # No seed: a random one, standard verification
    unseeded = json.loads(localspec(*args[:-3], "--json").stdout)
    assert unseeded["settings"]["verify"] == "standard"


def test_plain_mode_streams_text_and_prints_summary(tiny: TinyModels):
    res = localspec("run", "-m", str(tiny.target), "-p", "the cat", "-n", "20", "--temp", "0")
    assert res.returncode == 0
    full = json.loads(
        localspec("run", "-m", str(tiny.target), "-p", "the cat", "-n", "20", "--temp", "0", "--json").stdout
    )
    assert res.stdout == full["text"] + "\n"
    assert "20 tokens" in res.stderr and "tok/s" in res.stderr


def test_prompt_from_stdin_and_stop_string(tiny: TinyModels):
    full = json.loads(
        localspec("run", "-m", str(tiny.target), "-n", "40", "--temp", "0", "--json", input="the cat").stdout
    )
    text = full["text"]
    assert len(text) > 6
    stop = text[3:6]
    res = json.loads(
        localspec(
            "run",
            "-m",
            str(tiny.target),
            "-n",
            "40",
            "--temp",
            "0",
            "--json",
            "--stop",
            stop,
            input="the cat",
        ).stdout
    )
    assert res["stop_reason"] == "stop"
    assert res["text"] == text[: text.find(stop)]


def test_embedded_default_model_runs(tmp_path: Path):
    res = localspec(
        "run",
        "-p",
        "Say hello.",
        "-n",
        "12",
        "--temp",
        "0",
        "--json",
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr
    assert "using the demo pair: SmolLM2-135M-Instruct in F32 drafted by its Q4_1" in res.stderr
    assert "making the demo target once" in res.stderr
    out = json.loads(res.stdout)
    assert out["stats"]["n_generated"] >= 1 and out["stats"]["drafter"] == "draft+lookup"
    lookup = localspec(
        "run",
        "-p",
        "Say hello.",
        "-n",
        "12",
        "--temp",
        "0",
        "-d",
        "none",
        "--json",
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
    )
    assert "the demo target, SmolLM2-135M-Instruct in F32, with n-gram prompt lookup" in lookup.stderr
    assert "making the demo target" not in lookup.stderr  # made once
    assert json.loads(lookup.stdout)["stats"]["drafter"] == "ngram"


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_ctrl_c_sigterm_and_sighup_stop_cleanly_with_stats(smollm2_q4: Path, sig: int, code: int):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            "-m",
            str(smollm2_q4),
            "-p",
            "Count from 1 to 1000, one number per line.",
            "-n",
            "4000",
            "--temp",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    first = proc.stdout.read(8)  # wait until tokens stream
    assert first
    time.sleep(0.3)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert "Traceback" not in err.decode()
    assert "stop: interrupted" in err.decode()


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--draft-max", "0"], "--draft-max must be in [1, 256]"),
        (["--draft-max", "-3"], "--draft-max must be in [1, 256]"),
        (["-n", "0"], "--max-tokens must be >= 1"),
        (["--temp", "-1"], "--temp must be >= 0"),
        (["--top-p", "0"], "--top-p"),
        (["--draft-min", "-1"], "--draft-min"),
        (["--ctx", "-5"], "--ctx"),
        (["--threads", "0"], "--threads"),
        (["--lookup-min", "3", "--lookup-max", "2"], "--lookup-max"),
    ],
)
def test_bad_options(tiny: TinyModels, args, fragment):
    assert_one_line_error(localspec("run", "-m", str(tiny.target), "-p", "x", *args), fragment)


def test_missing_model_file(tmp_path: Path):
    assert_one_line_error(
        localspec("run", "-m", str(tmp_path / "nope.gguf"), "-p", "x"), "model file not found"
    )


def test_not_a_gguf(tmp_path: Path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all" * 10)
    assert_one_line_error(localspec("run", "-m", str(bad), "-p", "x"), "not a GGUF file")


def test_truncated_gguf_is_refused_and_left_alone(tiny: TinyModels, tmp_path: Path):
    data = tiny.target.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    assert_one_line_error(localspec("run", "-m", str(cut), "-p", "x"), "truncated")
    assert cut.stat().st_size == len(data) // 2
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(data[:40])
    assert_one_line_error(localspec("run", "-m", str(header_only), "-p", "x"), "corrupt or truncated")


def test_a_header_claiming_missing_layers_and_a_later_split_part_are_refused(
    tiny: TinyModels, tmp_path: Path
):
    import shutil

    import tiny_models

    lying = tiny_models.write_tiny_llama(
        tmp_path / "lying.gguf", tiny_models.TinySpec(seed=1, claimed_layers=100)
    )
    res = localspec("run", "-m", str(lying), "-p", "x", "-n", "2")
    assert_one_line_error(res, "its header says 100 layers, its tensors hold 2")
    assert "GGML_ASSERT" not in res.stdout + res.stderr
    second = tmp_path / "m-00002-of-00003.gguf"
    shutil.copy(tiny.target, second)
    assert_one_line_error(
        localspec("run", "-m", str(second), "-p", "x"), "is part 2 of a split model: pass the first part"
    )


def test_missing_draft_file(tiny: TinyModels, tmp_path: Path):
    assert_one_line_error(
        localspec("run", "-m", str(tiny.target), "-d", str(tmp_path / "d.gguf"), "-p", "x"),
        "draft file not found",
    )


def test_incompatible_vocabulary_names_token(tiny: TinyModels):
    res = localspec("run", "-m", str(tiny.target), "-d", str(tiny.other_vocab), "-p", "x")
    assert_one_line_error(res, "token 300")
    assert "'zz'" in res.stderr


def test_prompt_longer_than_context(tiny: TinyModels):
    res = localspec("run", "-m", str(tiny.target), "--ctx", "256", "-p", "the cat sat on the mat " * 20)
    assert_one_line_error(res, "longer than the context")


def test_no_prompt():
    assert_one_line_error(localspec("run", "-m", "x.gguf", input=""), "no prompt")


PADDED_MODES = {
    "fixed": ("--draft-mode", "fixed"),
    "auto": ("--draft-mode", "auto"),
    "tree": ("--draft-branches", "3", "--draft-p-split", "0.05", "--draft-mode", "fixed"),
    "chain": ("--lookup", "--draft-mode", "fixed"),
}


@pytest.mark.parametrize("mode", PADDED_MODES)
@pytest.mark.parametrize("larger", ["target", "draft"])
def test_vocabularies_of_different_sizes_work_in_every_mode(tiny: TinyModels, larger: str, mode: str):
    target, draft = (
        (tiny.padded_target, tiny.close) if larger == "target" else (tiny.target, tiny.padded_close)
    )
    common = ("run", "-m", str(target), "-p", "the cat sat on the", "-n", "40", "--seed", "5", "--json")
    alone = json.loads(localspec(*common, "-d", "none", "--no-lookup", "--temp", "0").stdout)
    for temp in ("0", "0.8"):
        res = localspec(*common, "-d", str(draft), *PADDED_MODES[mode], "--temp", temp)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        out = json.loads(res.stdout)
        assert len(out["tokens"]) == 40
        if mode != "auto":
            assert out["stats"]["n_drafted"] > 0
        if temp == "0":
            assert out["tokens"] == alone["tokens"]
    if larger == "target":
        # The padded target says ids the draft lacks: the test covers drafting after them.
        assert any(t >= 315 for t in alone["tokens"]), alone["tokens"]


def test_text_that_is_not_utf8_is_read_with_replacements_everywhere(tiny: TinyModels, tmp_path: Path):
    bad = b"the cat \xff\xfe sat"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    base = [*CLI, "run", "-m", str(tiny.target), "-n", "5", "--temp", "0", "--json"]
    by_arg = subprocess.run([*base, "-p", os.fsdecode(bad)], capture_output=True, env=env, timeout=120)
    by_stdin = subprocess.run(base, input=bad, capture_output=True, env=env, timeout=120)
    for res, source in ((by_arg, "the prompt"), (by_stdin, "stdin")):
        err = res.stderr.decode()
        assert res.returncode == 0 and "Traceback" not in err, err
        assert f"note: {source} is not valid UTF-8" in err
        assert len(json.loads(res.stdout)["tokens"]) == 5
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(b'{"question_id": 1, "category": "x", "turns": ["the cat \xff sat"]}\n')
    res = localspec("bench", "-m", str(tiny.target), "--prompts", str(prompts), "-n", "4", "--json")
    assert res.returncode == 0 and f"prompts {prompts} is not valid UTF-8" in res.stderr, res.stderr
    registry = tmp_path / "registry.toml"
    registry.write_bytes(b'["caf\xe9"]\ntarget = { repo = "a/b", quant = "Q4_0" }\n')
    res = localspec("models", "--json", timeout=120, env={**env, "LOCALSPEC_REGISTRY": str(registry)})
    assert res.returncode == 0 and "is not valid UTF-8" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_a_tiny_context_under_auto_is_no_traceback(tiny: TinyModels, tmp_path: Path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    res = localspec(
        "run",
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "--ctx",
        "8",
        "-p",
        "moon",
        "-n",
        "4",
        env=env,
        timeout=120,
    )
    assert "Traceback" not in res.stderr
    assert res.returncode == 0 or res.stderr.startswith("error: "), res.stderr


def test_auto_measures_nothing_before_the_first_token_and_caches_nothing(tiny: TinyModels, tmp_path: Path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    args = [
        "run",
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "-p",
        "moon",
        "-n",
        "40",
        "--temp",
        "0",
        "--json",
    ]
    res = localspec(*args, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    stats = json.loads(res.stdout)["stats"]
    assert stats["draft_mode"] == "auto" and stats["n_steps_drafted"] > 0
    # The costs it decided from, learned from the steps it ran; no cost file left behind.
    assert stats["costs_ms"]["target_1_ms"] > 0 and stats["costs_ms"]["draft-model_pass_ms"] >= 0
    assert not list(tmp_path.rglob("*costs*"))


def test_output_an_ascii_terminal_cannot_show_is_replaced(tiny: TinyModels):
    args = [
        *CLI,
        "run",
        "-m",
        str(tiny.target),
        "-p",
        "\u00e9t\u00e9 \u4e16",
        "-n",
        "30",
        "--temp",
        "1",
        "--seed",
        "3",
        "-q",
    ]
    shown = subprocess.run(
        args, capture_output=True, env={**os.environ, "PYTHONIOENCODING": "utf-8"}, timeout=120
    )
    assert not shown.stdout.isascii()  # the seed's text holds characters ASCII has not
    res = subprocess.run(
        args, capture_output=True, env={**os.environ, "PYTHONIOENCODING": "ascii"}, timeout=120
    )
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
    # The same text, each character ASCII cannot show replaced, and nothing else changed.
    assert res.stdout == shown.stdout.decode().encode("ascii", "replace")


def test_the_prompt_as_an_argument_from_a_file_or_with_p_is_the_same(tiny: TinyModels, tmp_path: Path):
    base = ("run", "-m", str(tiny.target), "-n", "6", "--temp", "0", "--json")
    by_p = json.loads(localspec(*base, "-p", "the cat sat").stdout)["tokens"]
    assert json.loads(localspec(*base, "the cat sat").stdout)["tokens"] == by_p
    file = tmp_path / "prompt.txt"
    file.write_text("the cat sat", encoding="utf-8")
    assert json.loads(localspec(*base, "-f", str(file)).stdout)["tokens"] == by_p
    assert_one_line_error(
        localspec(*base, "-p", "x", "the cat"), "give the prompt once, not as PROMPT and -p"
    )
    assert_one_line_error(localspec(*base, "-f", str(tmp_path / "none.txt")), "cannot read prompt file")


def test_version_and_short_help():
    version = localspec("--version")
    assert version.returncode == 0 and version.stdout.strip().startswith("localspec ")
    assert localspec("-V").stdout == version.stdout
    for args in (("-h",), ("run", "-h"), ("chat", "-h")):
        res = localspec(*args)
        assert res.returncode == 0 and "Usage:" in res.stdout, args


def test_quiet_prints_nothing_but_the_text():
    res = localspec("run", "-p", "Hi", "-n", "3", "--temp", "0", "-q")
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_llama_cpp_short_flags_and_help_panels(tiny: TinyModels):
    args = (
        "run",
        "-m",
        str(tiny.target),
        "-md",
        str(tiny.close),
        "-c",
        "300",
        "-t",
        "1",
        "-s",
        "3",
        "-ngl",
        "0",
        "-p",
        "moon",
        "-n",
        "4",
        "--json",
    )
    res = localspec(*args)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["seed"] == 3 and out["stats"]["drafter"] == "draft+lookup"
    help_text = localspec("run", "-h").stdout
    for panel in ("Model", "Drafting", "Sampling", "Performance", "Output"):
        assert f"─ {panel} ─" in help_text, panel


def test_help_lists_choices_and_shows_flags_without_a_value():
    for command in ((), ("run",), ("chat",), ("bench",), ("pull",), ("models",), ("rm",)):
        res = localspec(*command, "--help", timeout=60, env={**os.environ, "COLUMNS": "200"})
        assert res.returncode == 0 and "<bool>" not in res.stdout, (command, res.stdout)
    run_help = localspec("run", "--help", timeout=60, env={**os.environ, "COLUMNS": "200"}).stdout
    for choices in ("auto|fixed", "standard|coupled", "sample|greedy", "FILE|ALIAS"):
        assert choices in run_help, choices


def test_run_with_drafting_off_loads_no_draft_but_still_tells_a_mistyped_one(tiny: TinyModels, tmp_path):
    args = ("run", "-m", str(tiny.target), "-p", "the cat", "-n", "8", "--draft-mode", "off", "--json")
    res = localspec(*args, "-d", str(tiny.close))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["model_files"] == {"target": str(tiny.target), "draft": None}
    assert out["stats"]["draft_load_s"] == 0 and out["stats"]["drafter"] == "none"
    res = localspec(*args, "-d", str(tmp_path / "nosuch.gguf"))
    assert res.returncode != 0 and "nosuch.gguf" in res.stderr and "Traceback" not in res.stderr


def test_json_reports_the_thread_counts(tiny: TinyModels):
    from localspec.backend.hardware import physical_cores

    default = json.loads(
        localspec("run", "-m", str(tiny.target), "-p", "the cat", "-n", "4", "--json").stdout
    )["stats"]
    assert (
        default["threads_default"] == physical_cores()
        and 1 <= default["threads_fewest"] <= default["threads"] <= physical_cores()
    )
    given = json.loads(
        localspec("run", "-m", str(tiny.target), "-p", "the cat", "-n", "4", "--json", "-t", "1").stdout
    )["stats"]
    assert given["threads"] == given["threads_fewest"] == given["threads_default"] == 1


SNAPSHOTS = Path(__file__).parent / "snapshots"


@pytest.mark.parametrize("command", ["run", "chat", "serve", "bench"])
def test_help_is_its_snapshot(command: str):
    """The options built from the settings record read as the hand-written ones did: the snapshots
    were taken before they were built. A change to any option's help is reviewed here."""
    res = localspec(command, "--help", env={**os.environ, "COLUMNS": "100"})
    assert res.returncode == 0, res.stderr
    assert res.stdout == (SNAPSHOTS / f"help_{command}.txt").read_text(encoding="utf-8")


def test_a_spinner_names_the_files_while_they_load(tiny: TinyModels, tmp_path: Path):
    child = in_terminal(
        "run",
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "-p",
        "the cat",
        "-n",
        "4",
        "--temp",
        "0",
        env={**os.environ, "TERM": "xterm-256color", "XDG_CACHE_HOME": str(tmp_path)},
    )
    child.expect_exact(f"loading target {tiny.target.name} (")
    child.expect_exact(f"draft {tiny.close.name} (")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_every_path_is_checked_before_any_file_is_parsed(tiny: TinyModels, tmp_path: Path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf at all")
    assert_one_line_error(
        localspec("run", "-m", str(broken), "-d", str(tmp_path / "missing.gguf"), "-p", "x"),
        "draft file not found",
    )
    # The demo's target is made only once the paths stand: a mistyped -d is told at once.
    demo = localspec(
        "run",
        "-d",
        str(tmp_path / "missing.gguf"),
        "-p",
        "x",
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert_one_line_error(demo, "draft file not found", alone=False)
    assert (
        "making the demo target" not in demo.stderr
        and not (tmp_path / "cache" / "localspec" / "demo").exists()
    )


@pytest.mark.parametrize(
    "args, fragment, listed",
    [
        (("run", "--temp", "abc"), "Invalid value for '--temp'", "localspec run --help` lists the options)"),
        (
            ("run", "--no-such-option"),
            "No such option: --no-such-option",
            "localspec run --help` lists the options)",
        ),
        (("no-such-command",), "No such command 'no-such-command'", "localspec --help` lists the commands)"),
        (("rnu",), "Did you mean 'run'?", "localspec --help` lists the commands)"),
        (("index", "bild"), "Did you mean 'build'?", "localspec index --help` lists the commands)"),
        (("pull",), "Missing argument 'ALIAS'", "localspec pull --help` lists the options)"),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(args: tuple[str, ...], fragment: str, listed: str):
    res = localspec(*args)
    line = assert_one_line_error(res, fragment)
    assert res.returncode == 2 and line.endswith(listed)  # (`python -m localspec ...`: how the tests run it)


def test_config_shows_values_as_they_are_typed(tmp_path: Path):
    res = localspec("config", env={**os.environ, "COLUMNS": "200", "XDG_CONFIG_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    rows = {
        line.split("│")[1].strip(): line.split("│")[4].strip()
        for line in res.stdout.splitlines()
        if line.count("│") >= 6
    }
    assert (
        rows["lookup_method"] == "ngram"
        and rows["threads"] == "default"
        and rows["stop"] == "none"
        and rows["suffix_cache"] == "true"
    )


def test_models_lists_the_demo_pair(tmp_path: Path):
    res = localspec(
        "models",
        "--json",
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr
    demo = [row for row in json.loads(res.stdout) if row["embedded"]]
    assert len(demo) == 1 and demo[0]["alias"] is None and demo[0]["draft_files"][0].endswith(".Q4_1.gguf")


def test_a_reader_that_stops_reading_ends_the_run_quietly(tiny: TinyModels):
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            "-m",
            str(tiny.target),
            "-p",
            "the cat",
            "-n",
            "3000",
            "--ctx",
            "4096",
            "--temp",
            "0",
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.read(1)  # `head -c 1`
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == b"", err


def test_version_names_the_llama_cpp_build_and_its_backends():
    out = localspec("--version").stdout
    assert "llama-cpp-python " in out and "backends: " in out and "CPU" in out.split("backends: ")[1]


def test_a_chat_template_from_a_file_renders_the_prompt_and_a_bad_one_is_one_line(
    tiny: TinyModels, tmp_path: Path
):
    plain = tmp_path / "plain.jinja"
    plain.write_text("{{ messages[-1]['content'] }}")
    base = ("run", "-m", str(tiny.target), "-p", "the cat", "-n", "2", "--temp", "0", "--json")
    templated = localspec(*base, "--chat-template", str(plain))
    assert templated.returncode == 0 and "no chat template" not in templated.stderr, templated.stderr
    raw = json.loads(localspec(*base, "--raw").stdout)["stats"]
    # The prompt as it is, nothing around it
    assert json.loads(templated.stdout)["stats"]["n_prompt"] == raw["n_prompt"]
    (tmp_path / "broken.jinja").write_text("{% for m in messages %}")
    assert_one_line_error(
        localspec(*base, "--chat-template", str(tmp_path / "broken.jinja")),
        "--chat-template is not a Jinja template",
    )
    assert_one_line_error(
        localspec(*base, "--chat-template", str(tmp_path / "none.jinja")), "--chat-template cannot read"
    )
