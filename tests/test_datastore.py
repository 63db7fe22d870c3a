"""Datastores (REST): `localspec index` builds, lists, updates and removes them; `--datastore`
drafts from them without changing a greedy output; damage, another vocabulary and a full disk are
met as a user would want."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, localspec
from conftest import assert_greedy_equivalent, model_options

from localspec.backend.model import Model
from localspec.backend.tokenizer import Tokenizer
from localspec.datastore import build, store
from localspec.drafters.suffix_tree import MATCH_MAX
from localspec.errors import LocalspecError

SOURCES = Path(__file__).parent.parent / "localspec" / "drafters"


def make_folder(root: Path) -> Path:
    """Real code and text to index, with what must be skipped beside it."""
    (root / "pkg").mkdir(parents=True)
    for name in ("suffix.py", "suffix_index.py", "ngram.py"):
        (root / "pkg" / name).write_text((SOURCES / name).read_text())
    (root / "notes.md").write_text("# Notes\n\nThe suffix index keeps sorted hashes of every n-gram.\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    (root / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))  # not UTF-8: binary to us
    (root / "empty.py").write_text("")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0\0")
    (root / "skip_me.py").write_text("print('left out')\n")
    (root / "gone.py").symlink_to(root / "nowhere.py")  # listed, but cannot be read
    return root


def env_of(home: Path) -> dict[str, str]:
    return {**os.environ, "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache")}


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's data directory and that of the commands it starts: the same folder."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def index(*args: str, home: Path):
    return localspec("index", *args, timeout=120, env=env_of(home))


def test_build_list_lookup_update_and_remove(data_home: Path, smollm2_q4: Path):
    src = make_folder(data_home / "src")
    res = index("build", "code", str(src), "-m", str(smollm2_q4), "--exclude", "skip_*", home=data_home)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("built code: ") and "from 4 files" in res.stdout, res.stdout
    assert "skipped: 2 binary, 1 empty, 1 unreadable" in res.stderr, res.stderr
    folder = store.folder("code")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o600}

    (listed,) = json.loads(index("list", "--json", home=data_home).stdout)
    meta = store.read_meta("code")
    assert listed["name"] == "code" and listed["files"] == 4 and listed["tokens"] == meta.n_tokens > 1000
    assert sorted(Path(f.path).name for f in meta.files) == [
        "ngram.py",
        "notes.md",
        "suffix.py",
        "suffix_index.py",
    ]

    # A stretch of a file finds the file: its longest match and what followed it there.
    with Tokenizer.load(smollm2_q4) as tok:
        ids = tok.tokenize((src / "pkg" / "suffix_index.py").read_text())
        m, trie = store.open_index(meta).match(ids[100:140].tolist(), 2, 8)
        assert m == MATCH_MAX and trie is not None
        node, path = 0, []
        for _ in range(8):
            token, node, _count = trie.children(node)[0]
            path.append(token)
        assert path == ids[140:148].tolist()

    (src / "notes.md").write_text("# Notes\n\nChanged.\n")
    (src / "pkg" / "ngram.py").unlink()
    (src / "pkg" / "tree.py").write_text((SOURCES / "tree.py").read_text())
    os.utime(src / "pkg" / "suffix.py")  # a new time, the same text: kept by its hash
    res = index("update", "code", home=data_home)
    assert res.returncode == 0, res.stderr
    assert "files: 1 added, 1 changed, 1 removed, 2 unchanged" in res.stdout, res.stdout
    res = index("build", "fresh", str(src), "-m", str(smollm2_q4), "--exclude", "skip_*", home=data_home)
    assert res.returncode == 0, res.stderr
    updated, fresh = (store.open_index(store.read_meta(n)) for n in ("code", "fresh"))
    assert np.array_equal(updated.tokens, fresh.tokens)
    assert all(
        np.array_equal(updated.keys[n], fresh.keys[n]) and np.array_equal(updated.pos[n], fresh.pos[n])
        for n in updated.keys
    )

    for name in ("code", "fresh"):
        res = index("rm", name, home=data_home)
        assert res.returncode == 0 and res.stdout.startswith(f"removed {name} ("), res.stdout
    assert "no datastores" in index("list", home=data_home).stdout
    assert_one_line_error(index("rm", "code", home=data_home), "no datastore named 'code'")


PROMPT_LINES = 14  # of suffix_index.py: the prompt asks for the rest


def run(home: Path, model: Path, prompt: str, *extra: str) -> dict:
    res = localspec(
        "run",
        "-m",
        str(model),
        "-p",
        prompt,
        "--raw",
        "-n",
        "48",
        "--temp",
        "0",
        "--json",
        *extra,
        timeout=180,
        env=env_of(home),
    )
    assert res.returncode == 0, res.stderr
    return {**json.loads(res.stdout), "stderr": res.stderr}


def test_greedy_output_with_a_datastore_is_the_target_alones(data_home: Path, smollm2_q4: Path):
    src = make_folder(data_home / "src")
    code = (src / "pkg" / "suffix_index.py").read_text().splitlines()
    prompt = "\n".join(code[:PROMPT_LINES]) + "\n"
    alone = run(data_home, smollm2_q4, prompt, "-d", "none", "--no-lookup")
    # What the target says here, among the files (a 135M model does not recite the real code): the
    # datastore then proposes what the target accepts.
    (src / "said.txt").write_text(prompt + alone["text"])
    assert index("build", "code", str(src), "-m", str(smollm2_q4), home=data_home).returncode == 0
    drafted = run(
        data_home, smollm2_q4, prompt, "--datastore", "code", "--draft-mode", "fixed", "--no-suffix-cache"
    )
    assert drafted["stats"]["drafter"] == "suffix"
    store_counts = drafted["stats"]["origins"]["datastore"]
    assert store_counts["accepted"] >= 0.5 * drafted["stats"]["n_generated"], drafted["stats"]
    with Model(smollm2_q4, model_options()) as target:
        assert_greedy_equivalent(target, target.tokenize(prompt), alone["tokens"], drafted["tokens"])


def test_a_damaged_datastore_is_rebuilt_and_bad_ones_are_one_line(data_home: Path, smollm2_q4: Path, tiny):
    src = make_folder(data_home / "src")
    assert index("build", "code", str(src), "-m", str(smollm2_q4), home=data_home).returncode == 0
    tokens = store.folder("code") / "tokens.npy"
    tokens.write_bytes(tokens.read_bytes()[:-100])
    out = run(data_home, smollm2_q4, "def match(", "--datastore", "code")
    assert "damaged (tokens.npy" in out["stderr"] and "is rebuilt: " in out["stderr"], out["stderr"]
    assert "damaged" not in run(data_home, smollm2_q4, "def match(", "--datastore", "code")["stderr"]

    args = ("run", "-m", str(smollm2_q4), "-p", "hi", "-n", "4")
    assert_one_line_error(
        localspec(*args, "--datastore", "nosuch", env=env_of(data_home)),
        "no datastore named 'nosuch'",
        alone=False,
    )
    assert_one_line_error(
        localspec(*args, "--datastore", "code", "--no-lookup", env=env_of(data_home)),
        "--datastore drafts by suffix lookup",
    )
    assert_one_line_error(
        localspec(*args, "--datastore", "../x", env=env_of(data_home)), "is not a datastore name"
    )
    assert_one_line_error(
        index("build", "code", str(data_home / "nowhere"), home=data_home), "no such file or folder"
    )
    assert_one_line_error(index("build", "a/b", str(src), home=data_home), "is not a datastore name")

    # Built by a model of another vocabulary: refused by the target, in one line.
    assert index("build", "tiny", str(src), "-m", str(tiny.target), home=data_home).returncode == 0
    assert_one_line_error(
        localspec(*args, "--datastore", "tiny", env=env_of(data_home)),
        "was built for another vocabulary",
        alone=False,
    )
    assert_one_line_error(
        index("update", "tiny", "-m", str(smollm2_q4), home=data_home), "was built with another vocabulary"
    )

    (store.folder("code") / "meta.json").write_text("{not json")
    assert_one_line_error(
        localspec(*args, "--datastore", "code", env=env_of(data_home)),
        "damaged (meta.json is unreadable",
        alone=False,
    )
    (store.root() / "half").mkdir()  # a folder of the datastores' without its meta.json
    listed = {d["name"]: d for d in json.loads(index("list", "--json", home=data_home).stdout)}
    assert listed["code"]["damaged"].startswith("meta.json is unreadable") and listed["tiny"]["files"] == 5
    assert listed["half"]["damaged"] == "meta.json is missing"
    assert index("list", home=data_home).returncode == 0


def test_a_write_that_fails_leaves_the_datastore_before_it_whole(
    data_home: Path, smollm2_q4: Path, monkeypatch: pytest.MonkeyPatch
):
    src = make_folder(data_home / "src")
    with Tokenizer.load(smollm2_q4) as tok:
        build.build(build.new_meta("code", tok, [src], (), ()), tok)
        before = store.read_meta("code")
        (src / "notes.md").write_text("more notes " * 100)

        def full(*_a, **_k):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(np, "save", full)
        with pytest.raises(
            LocalspecError, match="cannot write the datastore 'code' .*No space left on device"
        ):
            build.build(build.again(before, tok), tok, before)
    after = store.read_meta("code")
    assert after == before and store.open_index(after).tokens.shape[0] == before.n_tokens + len(before.files)
    assert sorted(p.name for p in store.root().iterdir()) == [".code.lock", "code"]


def test_serve_drafts_every_request_from_its_datastore(data_home: Path, smollm2_q4: Path):
    from server_helpers import call, start

    src = make_folder(data_home / "src")
    prompt = "\n".join((src / "pkg" / "ngram.py").read_text().splitlines()[:PROMPT_LINES]) + "\n"
    alone = run(data_home, smollm2_q4, prompt, "-d", "none", "--no-lookup")
    (src / "said.txt").write_text(prompt + alone["text"])
    assert index("build", "code", str(src), "-m", str(smollm2_q4), home=data_home).returncode == 0
    served = start("-m", str(smollm2_q4), "--datastore", "code", "--no-suffix-cache")
    try:
        for _ in range(2):
            status, body, _ = call(
                served,
                "POST",
                "/v1/completions",
                {"prompt": prompt, "max_tokens": 48, "temperature": 0, "speculative.mode": "fixed"},
            )
            assert status == 200, body
            assert body["choices"][0]["text"] == alone["text"]
            assert body["timings"]["draft_n_accepted"] >= 0.5 * body["usage"]["completion_tokens"], body[
                "timings"
            ]
    finally:
        assert served.stop() == 0


def test_beside_a_draft_model_the_datastore_is_chained_before_it(data_home: Path, tiny):
    src = make_folder(data_home / "src")
    assert index("build", "tiny", str(src), "-m", str(tiny.target), home=data_home).returncode == 0
    prompt = (src / "pkg" / "ngram.py").read_text()[:400]
    alone = run(data_home, tiny.target, prompt, "-d", "none", "--no-lookup")
    chained = run(
        data_home, tiny.target, prompt, "-d", str(tiny.close), "--datastore", "tiny", "--draft-mode", "fixed"
    )
    assert chained["stats"]["drafter"] == "chain" and chained["stats"]["n_drafted"] > 0
    with Model(tiny.target, model_options()) as target:
        assert_greedy_equivalent(target, target.tokenize(prompt), alone["tokens"], chained["tokens"])
