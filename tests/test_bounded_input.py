"""Small inputs that took the whole process, or all its memory: grammars and schemas past the
limits, a context no machine holds, crafted headers llama.cpp asserts on, folders holding pipes
and links out of them, damaged records. Each is a one-line error (or a 400 from the server, which
goes on answering), never a crash, a hang or a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import CLI, assert_one_line_error, localspec
from conftest import TinyModels
from server_helpers import call, start
from tiny_models import TinySpec, write_tiny_llama

from localspec.backend.gguf_file import check_gguf
from localspec.backend.grammar_limits import Limits, gbnf_limit_problem, schema_limit_problem
from localspec.errors import LocalspecError
from localspec.session.memory_fit import check_context_fits

NESTED = "root ::= " + "(" * 100_000 + '"a"' + ")" * 100_000  # 200 KB: a segfault in llama.cpp's parser
CHAIN = "\n".join(["root ::= r0", *(f'r{i} ::= r{i + 1} | "x"' for i in range(100_000)), 'r100000 ::= "y"'])
GRAMMARS = {
    "nested": (NESTED, "nests parentheses 100,000 deep, past the limit of 256"),
    "chain": (CHAIN, "past the limit"),
    "backwards repetition": ('root ::= "a"{5,2}', "at least 5 and at most 2 cannot both hold"),
    "large repetition": ('root ::= "a"{0,50000}', "repeats '{0,50000}', past the limit of 10,000"),
    "many alternatives": (
        "root ::= " + " | ".join(f'"w{i}"' for i in range(20_000)),
        "20,000 alternatives, past the limit of 10,000",
    ),
}
SCHEMAS = {
    "huge maxLength": (
        {"type": "string", "maxLength": 1_000_000_000},
        "maxLength 1,000,000,000, past the limit of 10,000",
    ),
    "huge enum": ({"enum": list(range(100_000))}, "an enum of 100,000 values, past the limit"),
    "empty enum": ({"enum": []}, "has an empty enum: nothing can match"),
    "ref a number": ({"$ref": 5}, "has $ref 5: give a string"),
    "pattern a number": ({"type": "string", "pattern": 5}, "has pattern 5: give a string"),
    "properties a list": ({"type": "object", "properties": [1, 2]}, "has properties [1, 2]: give an object"),
    "pattern spelled out": (
        {"type": "string", "pattern": "^(ab{100}){200}$"},
        "a pattern that repeats past the limit",
    ),
    "min above max": ({"type": "array", "minItems": 5, "maxItems": 2}, "minItems 5 above maxItems 2"),
}


def _deep_schema(depth: int) -> str:
    return '{"type": "object"' + ', "properties": {"a": {"type": "object"' * depth + "}}" * depth + "}"


@pytest.mark.parametrize("case", GRAMMARS)
def test_a_grammar_past_the_limits_is_one_line_before_llama_cpp_sees_it(
    tiny: TinyModels, tmp_path: Path, case: str
):
    text, said = GRAMMARS[case]
    (tmp_path / "g.gbnf").write_text(text)
    res = localspec(
        "run", "-m", str(tiny.target), "--grammar", str(tmp_path / "g.gbnf"), "-p", "x", "-n", "3"
    )
    assert said in assert_one_line_error(res, "--grammar ") and res.returncode == 1


@pytest.mark.parametrize("case", SCHEMAS)
def test_a_schema_past_the_limits_or_malformed_is_one_line(tiny: TinyModels, tmp_path: Path, case: str):
    schema, said = SCHEMAS[case]
    (tmp_path / "s.json").write_text(json.dumps(schema))
    res = localspec(
        "run", "-m", str(tiny.target), "--json-schema", str(tmp_path / "s.json"), "-p", "x", "-n", "3"
    )
    # Llama.cpp's grammar dump is not printed either
    assert said in assert_one_line_error(res, "--json-schema ")


def test_a_schema_nested_thousands_deep_is_one_line(tiny: TinyModels, tmp_path: Path):
    (tmp_path / "s.json").write_text(_deep_schema(3000))
    assert_one_line_error(
        localspec("run", "-m", str(tiny.target), "--json-schema", str(tmp_path / "s.json"), "-p", "x"),
        "nests past the limit of 256",
    )


def test_the_limits_take_what_people_send_and_may_be_raised(monkeypatch):
    tools = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 100},
            "days": {"type": "integer", "minimum": 1},
            "pattern": {"type": "string"},
            "items": {"type": "array", "items": {"enum": ["a", "b"]}},
        },
    }
    assert schema_limit_problem(tools) is None  # a property named like a keyword is a property
    # Structure in literals and comments
    assert gbnf_limit_problem('root ::= ("a" | [x\\]|(]) # ( ( ( |\nb ::= "\\"((" ') is None
    many = "root ::= " + " | ".join(f'"w{i}"' for i in range(20_000))
    assert gbnf_limit_problem(many) is not None
    monkeypatch.setenv("LOCALSPEC_GRAMMAR_LIMITS", "alternatives=30000")
    assert Limits.current().alternatives == 30_000 and gbnf_limit_problem(many) is None
    monkeypatch.setenv("LOCALSPEC_GRAMMAR_LIMITS", "nesting=9999")
    with pytest.raises(ValueError, match="names among alternatives, bytes, repeat"):
        Limits.current()


def test_a_context_the_machine_cannot_hold_is_refused_before_anything_loads(
    tiny: TinyModels, smollm2_q4: Path
):
    info = check_gguf(tiny.target)
    per_token = 2 * 64 * 2 * 2  # layers x (k + v) x f16, the tiny model's 64-wide layers
    check_context_fits(1000, [info], available=1000 * per_token)  # exactly fits
    with pytest.raises(
        LocalspecError, match=r"--ctx 1,001 needs .* GiB of KV cache.* at most about 1,000 tokens fit"
    ):
        check_context_fits(1001, [info], available=1000 * per_token)
    with pytest.raises(LocalspecError, match="at most about 500 tokens"):
        check_context_fits(1000, [info, info], available=1000 * per_token)  # the draft keeps one too
    assert_one_line_error(
        localspec("run", "-m", str(tiny.target), "--ctx", "2000000000", "-p", "x"),
        "--ctx must be in [0, 16777216]",
    )
    assert_one_line_error(
        localspec(
            "run", "-m", str(tiny.target), "-p", "x", env={**os.environ, "LOCALSPEC_CTX": "99999999999"}
        ),
        "LOCALSPEC_CTX must be in [0, 16777216]",
    )
    # SmolLM2's KV cache takes 23 KB a token: 368 GB for this context, more than any machine here has.
    assert "GiB of KV cache" in assert_one_line_error(
        localspec("run", "-m", str(smollm2_q4), "--ctx", "16000000", "-p", "x"), "--ctx 16,000,000 needs"
    )


@pytest.mark.parametrize(
    "header, said",
    [
        ((("llama.expert_count", 0), ("llama.expert_used_count", 9)), "between 1 and all of its experts"),
        ((("llama.expert_count", 8), ("llama.expert_used_count", 0)), "between 1 and all of its experts"),
        ((("llama.expert_count", 4096), ("llama.expert_used_count", 2)), "past llama.cpp's 1024"),
        (
            (("llama.expert_count", 8), ("llama.expert_used_count", 2), ("llama.expert_group_count", 8)),
            "not fewer than its 8 experts",
        ),
        (
            (
                ("llama.expert_count", 8),
                ("llama.expert_used_count", 2),
                ("llama.expert_group_count", 3),
                ("llama.expert_group_used_count", 1),
            ),
            "expert_group_count = 3",
        ),
        (
            (
                ("llama.expert_count", 8),
                ("llama.expert_used_count", 2),
                ("llama.expert_group_count", 4),
                ("llama.expert_group_used_count", 4),
            ),
            "expert_group_used_count = 4",
        ),
        ((("llama.expert_group_count", 2),), "without experts"),
        ((("llama.nextn_predict_layers", 3),), "nextn_predict_layers = 3, more than its 2 layers"),
        ((("llama.block_count", 600),), "block_count = 600, where llama.cpp takes 1 to 512"),
    ],
)
def test_a_header_llama_cpp_would_abort_on_is_refused_in_one_line(tmp_path: Path, header: tuple, said: str):
    crafted = write_tiny_llama(tmp_path / "crafted.gguf", TinySpec(seed=1, header=header))
    with pytest.raises(LocalspecError, match="its header gives"):
        check_gguf(crafted)
    assert said in assert_one_line_error(
        localspec("run", "-m", str(crafted), "-p", "x", "-n", "2"), "model file is inconsistent"
    )


def _index_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_index_build_reads_regular_files_in_the_folder_and_cleans_up_after_a_killed_build(
    tiny: TinyModels, tmp_path: Path
):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("the cat sat on the mat\n" * 10)
    os.mkfifo(folder / "pipe.py")  # a build that opened it would wait for a writer forever
    secret = tmp_path / "secret.txt"
    secret.write_text("a secret outside the folder\n")
    (folder / "link.txt").symlink_to(secret)
    (folder / "inner.txt").symlink_to(folder / "a.txt")  # a link inside the folder is taken
    env = _index_env(tmp_path)
    stale = tmp_path / "data" / "localspec" / "datastores" / ".notes.abcd_123"  # what SIGKILL left mid-build
    stale.mkdir(parents=True)
    other = stale.parent / ".notes.more.abcd_123"  # another datastore's ("notes.more"), left alone
    other.mkdir()
    res = localspec("index", "build", "notes", str(folder), "-m", str(tiny.target), env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "1 links out of their folder" in res.stderr and "1 not regular files" in res.stderr
    meta = json.loads((tmp_path / "data" / "localspec" / "datastores" / "notes" / "meta.json").read_text())
    assert sorted(Path(f["path"]).name for f in meta["files"]) == ["a.txt", "inner.txt"]
    assert not stale.exists() and other.exists()
    followed = localspec(
        "index", "build", "notes", str(folder), "-m", str(tiny.target), "--follow-links", env=env, timeout=60
    )
    assert followed.returncode == 0 and "links out of their folder" not in followed.stderr, followed.stderr


def test_a_damaged_datastore_record_is_said_in_words(tiny: TinyModels, tmp_path: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("the cat sat on the mat\n" * 10)
    env = _index_env(tmp_path)
    assert localspec("index", "build", "notes", str(folder), "-m", str(tiny.target), env=env).returncode == 0
    meta_path = tmp_path / "data" / "localspec" / "datastores" / "notes" / "meta.json"
    good = json.loads(meta_path.read_text())
    for key, value in (("n_tokens", "many"), ("built", 1e300), ("paths", 5), ("skipped", {"x": "y"})):
        meta_path.write_text(json.dumps({**good, key: value}))
        for args in (
            ("index", "list"),
            ("index", "update", "notes"),
            ("run", "-m", str(tiny.target), "--datastore", "notes", "-p", "x", "-n", "2"),
        ):
            res = localspec(*args, env=env)
            assert "Traceback" not in res.stderr, (key, args, res.stderr)
            if args[1] != "list":
                assert f"meta.json's {key} is" in assert_one_line_error(res, "is damaged", alone=False), (
                    key,
                    args,
                )
    meta_path.write_text(json.dumps(good))
    (meta_path.parent / "tokens.npy").write_bytes(b"")  # emptied: rebuilt from the files, said once
    res = localspec(
        "run", "-m", str(tiny.target), "--datastore", "notes", "-p", "the cat", "-n", "2", env=env
    )
    assert res.returncode == 0 and "tokens.npy is unreadable" in res.stderr and "is rebuilt" in res.stderr, (
        res.stderr
    )


@pytest.mark.parametrize("repo", ["../tiny", "http:/tiny", "t/ti ny", "a/b/c", "a--b/c"])
def test_a_registry_repo_id_the_hub_would_refuse_is_one_line(tmp_path: Path, repo: str):
    (tmp_path / "r.toml").write_text(f'["x"]\ntarget = {{ repo = "{repo}", quant = "Q4_0" }}\n')
    env = {**os.environ, "LOCALSPEC_REGISTRY": str(tmp_path / "r.toml"), "XDG_CONFIG_HOME": str(tmp_path)}
    assert "target.repo must be 'owner/name'" in assert_one_line_error(localspec("pull", "x", env=env))


@pytest.mark.parametrize(
    "line, said",
    [
        ("stop = [1, 2]", "stop must be a list of texts"),
        ("datastore = [1]", "datastore must be a list of texts"),
    ],
)
def test_config_values_of_the_wrong_type_are_one_line(tiny: TinyModels, tmp_path: Path, line: str, said: str):
    (tmp_path / "localspec").mkdir()
    (tmp_path / "localspec" / "config.toml").write_text(line + "\n")
    env = {**os.environ, "LOCALSPEC_CONFIG": str(tmp_path / "localspec" / "config.toml")}
    assert said in assert_one_line_error(localspec("run", "-m", str(tiny.target), "-p", "x", env=env))


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path: Path):
    (tmp_path / "localspec").mkdir()
    (tmp_path / "localspec" / "config.toml").write_bytes(b"\xef\xbb\xbftemp = 0.25\n")
    out = json.loads(
        localspec(
            "config",
            "--json",
            env={**os.environ, "LOCALSPEC_CONFIG": str(tmp_path / "localspec" / "config.toml")},
        ).stdout
    )
    assert out["settings"]["temp"] == {"value": 0.25, "from": "config file"}


def test_tables_to_a_reader_that_leaves_end_quietly():
    # `head -c 10` leaves while Rich writes; `head -20` of the help after Rich wrote it all, while
    # click writes its last line.
    for args, lines in (
        (["config"], 0),
        (["models"], 0),
        (["index", "--help"], 0),
        (["run", "--help"], 0),
        (["--help"], 20),
    ):
        proc = subprocess.Popen(
            [*CLI, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "COLUMNS": "100"},
        )
        assert proc.stdout is not None
        assert all(proc.stdout.readline() for _ in range(lines)) if lines else proc.stdout.read(10)
        proc.stdout.close()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and err == b"", (args, proc.returncode, err)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_the_server_answers_hostile_requests_with_400_and_goes_on(tiny: TinyModels):
    served = start("-m", str(tiny.target))
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "the cat"}],
        "max_tokens": 3,
        "temperature": 0,
    }
    fn = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    hostile = [
        {**chat, "grammar": NESTED},
        {**chat, "grammar": 'root ::= "a"{5,2}'},
        {
            **chat,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"schema": {"type": "string", "maxLength": 1_000_000_000}},
            },
        },
        {**chat, "response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": 5}}}},
        {**chat, "tools": [fn], "tool_choice": {"type": "function", "function": "f"}},
        {**chat, "tools": [fn], "tool_choice": ["f"]},
        {
            **chat,
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "f", "parameters": {"type": "string", "pattern": 5}},
                }
            ],
        },
        {
            **chat,
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": {"x": 1}, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                chat["messages"][0],
            ],
        },
        {**chat, "messages": [{"role": ["user"], "content": "x"}]},
    ]
    rss = [_rss_kb(served.proc.pid)]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            rss.append(_rss_kb(served.proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for body in hostile:
            code, out, _ = call(served, "POST", "/v1/chat/completions", body)
            assert code == 400 and "error" in out, (body.keys(), code, out)
            assert call(served, "GET", "/health")[0] == 200
        # Arguments "[" * 5000 are text, as a client may send: the template gets them as text.
        deep_args = {
            **chat,
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[" * 5000}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                chat["messages"][0],
            ],
        }
        assert call(served, "POST", "/v1/chat/completions", deep_args)[0] in (200, 400)
        code, out, _ = call(served, "POST", "/v1/chat/completions", chat)
        assert code == 200 and out["usage"]["completion_tokens"] == 3
    finally:
        sampling.set()
        sampler.join()
    assert max(rss) - rss[0] < 200_000, (rss[0], max(rss))  # KB: no request took memory without bound
    served.proc.send_signal(signal.SIGHUP)  # as SIGTERM: a graceful stop, exit code 0
    assert served.proc.wait(60) == 0
    assert "Traceback" not in "".join(served.log)


def test_chat_refuses_a_grammar_or_schema_past_the_limits_and_goes_on(tiny: TinyModels, tmp_path: Path):
    (tmp_path / "g.gbnf").write_text(NESTED)
    (tmp_path / "s.json").write_text(_deep_schema(3000))
    (tmp_path / "ref.json").write_text(json.dumps({"$ref": 5}))
    lines = [
        f"/set grammar {tmp_path / 'g.gbnf'}",
        f"/set json-schema {tmp_path / 's.json'}",
        f"/set json-schema {tmp_path / 'ref.json'}",
        "the cat",
        "/exit",
    ]
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
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert (
        "nests parentheses 100,000 deep" in res.stderr
        and "nests past the limit of 256" in res.stderr
        and "$ref 5" in res.stderr
    )
    assert "bye: 1 replies" in res.stderr  # the message after them was answered


def test_a_model_whose_output_is_not_numbers_is_one_line(tmp_path: Path):
    broken = write_tiny_llama(tmp_path / "nan.gguf", TinySpec(seed=1, logit_scale=float("nan")))
    said = assert_one_line_error(
        localspec("run", "-m", str(broken), "-p", "the cat", "-n", "4", "--temp", "0.8"),
        "not numbers",
        alone=False,
    )
    assert "weights are damaged" in said
