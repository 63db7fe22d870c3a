"""Suffix drafting from the command line: `run` learns across processes through the cache file,
which stays private, survives damage and is emptied by `localspec cache clear`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from cli_helpers import localspec

PROMPT = "List five colours and one thing of each colour."


def run(cache_home: Path, model: Path, *extra: str) -> tuple[dict, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    res = localspec(
        "run",
        "-m",
        str(model),
        "-p",
        PROMPT,
        "-n",
        "40",
        "--temp",
        "0",
        "--lookup-method",
        "suffix",
        "--json",
        *extra,
        timeout=180,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout), res.stderr


def cache_files(home: Path) -> list[Path]:
    folder = home / "localspec" / "suffix"
    return sorted(p for p in folder.glob("*.bin")) if folder.exists() else []


def test_a_second_run_of_the_same_prompt_drafts_from_the_first(tmp_path: Path, smollm2_q4: Path):
    # Fixed drafting: whether a draft is verified must not depend on this machine's timings here.
    first, _ = run(tmp_path, smollm2_q4, "--draft-mode", "fixed")
    second, _ = run(tmp_path, smollm2_q4, "--draft-mode", "fixed")
    assert second["tokens"] == first["tokens"]
    assert second["stats"]["n_accepted"] >= 0.8 * second["stats"]["n_generated"]
    assert second["stats"]["n_accepted"] > 2 * first["stats"]["n_accepted"]
    (path,) = cache_files(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert second["settings"]["lookup_method"] == "suffix"


def test_no_suffix_cache_writes_nothing_and_damage_is_one_notice(tmp_path: Path, smollm2_q4: Path):
    run(tmp_path, smollm2_q4, "--no-suffix-cache")
    assert cache_files(tmp_path) == []
    run(tmp_path, smollm2_q4)
    (path,) = cache_files(tmp_path)
    path.write_bytes(b"LSSUFX01 garbage")
    out, err = run(tmp_path, smollm2_q4)
    notices = [line for line in err.splitlines() if "suffix cache" in line]
    assert len(notices) == 1 and "starts anew" in notices[0]
    assert "Traceback" not in err and out["stop_reason"] in ("length", "eos")
    _, err = run(tmp_path, smollm2_q4)  # rewritten whole at the end of the damaged run
    assert "suffix cache" not in err


def test_cache_clear_empties_the_cache_directory(tmp_path: Path, smollm2_q4: Path):
    run(tmp_path, smollm2_q4)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    shown = localspec("cache", "show", timeout=60, env=env)
    assert shown.returncode == 0 and ".bin" in shown.stdout
    res = localspec("cache", "clear", timeout=60, env=env)
    assert res.returncode == 0 and res.stdout.startswith("removed 2 files")  # the cache and its lock
    assert cache_files(tmp_path) == [] and not (tmp_path / "localspec").exists()
