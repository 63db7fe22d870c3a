"""The benchmarks' harness (benchmarks/harness) and the rules every script keeps: run as a module
from the project root, no sys.path edits, nothing imported from the tests, arguments through the
harness. A benchmark's numbers are never checked here; that it runs, pairs and summarises is."""

from __future__ import annotations

import ast
import functools
import http.server
import json
import runpy
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import TinyModels

from benchmarks.harness import options
from benchmarks.harness.summary import interleaved, paired_ratios, table, with_baseline

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p for p in (ROOT / "benchmarks").glob("*/*.py") if p.name != "__init__.py")
# The scripts (a main each); the rest are the harness and their groups' libraries
SCRIPTS = [p for p in MODULES if "def main(" in p.read_text(encoding="utf-8") and p.parent.name != "harness"]
TESTS = {p.stem for p in (ROOT / "tests").glob("*.py")}


def module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_the_scripts_are_grouped_and_found() -> None:
    groups = {p.parent.name for p in SCRIPTS}
    assert groups == {"wait", "drafters", "peers", "costs", "testbeds"}
    # Scripts live in a group's folder, not beside the package's own __init__.py
    assert [p.name for p in (ROOT / "benchmarks").glob("*.py")] == ["__init__.py"]


@pytest.mark.parametrize("path", MODULES, ids=module)
def test_small_no_sys_path_edits_and_nothing_from_the_tests(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300, "split by meaning, as the package's modules are"
    tree = ast.parse(text)
    assert "sys.path" not in ast.unparse(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            assert name.split(".")[0] not in TESTS | {"tests"}, f"{path.name} imports {name} from the tests"


@pytest.mark.parametrize("path", SCRIPTS, ids=module)
def test_every_script_takes_help_as_a_module(path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", [path.name, "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module(module(path), run_name="__main__")
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_a_missing_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks.wait.first_runs", str(tmp_path / "none.gguf"), "--prompts", "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"first_runs.py: target {tmp_path / 'none.gguf'} does not exist"
    ]


def test_csv_lists_and_options_after_the_double_dash(tmp_path: Path) -> None:
    target = tmp_path / "t.gguf"
    target.touch()
    ap = options.parser("doc")
    options.add_target(ap)
    ap.add_argument("--sizes", type=options.csv(int), default="2000,4000")
    options.add_extra(ap, "run")
    a = options.parse(ap, [str(target), "--sizes", "1,2", "--", "-n", "16", "--temp", "0"])
    assert (a.sizes, a.extra) == ([1, 2], ["-n", "16", "--temp", "0"])
    a = options.parse(ap, [str(target)])
    assert (a.sizes, a.extra) == ([2000, 4000], [])
    with pytest.raises(SystemExit):
        options.parse(ap, [str(target), "--sizes", "1,x"])


def test_paired_ratios_pair_each_mode_with_its_own_baseline() -> None:
    # Drift between prompts must not leak into the ratio: each mode is divided by the baseline of
    # the same prompt and repeat, then the median taken.
    rows = [
        {"p": 1, "mode": "baseline", "v": 10.0, "c": "a"},
        {"p": 1, "mode": "auto", "v": 20.0, "c": "a"},
        {"p": 2, "mode": "baseline", "v": 100.0, "c": "b"},
        {"p": 2, "mode": "auto", "v": 150.0, "c": "b"},
        {"p": 3, "mode": "baseline", "v": 1.0, "c": "b"},
        {"p": 3, "mode": "auto", "v": 1.0, "c": "b"},
    ]
    by_c = paired_ratios(rows, lambda r: r["p"], lambda r: r["v"], lambda r: r["c"])
    assert by_c == {"a": {"baseline": 1.0, "auto": 2.0}, "b": {"baseline": 1.0, "auto": 1.25}}
    assert paired_ratios(rows, lambda r: r["p"], lambda r: r["v"])["all"]["auto"] == 1.5


def test_interleaving_and_tables() -> None:
    assert with_baseline(["auto", "baseline", "fixed-4"]) == ["baseline", "auto", "fixed-4"]
    order = list(interleaved(["p", "q"], ["baseline", "auto"], repeat=2))
    assert order[:4] == [("p", 0, "baseline"), ("p", 0, "auto"), ("p", 1, "baseline"), ("p", 1, "auto")]
    assert len(order) == 8
    assert table(["a", "b"], [["x", 1.234]]) == "| a | b |\n| --- | --- |\n| x | 1.23 |"


def test_concurrent_reads_a_servers_unlabelled_metrics(tmp_path: Path) -> None:
    from benchmarks.wait.concurrent import counters

    (tmp_path / "metrics").write_text(
        "# HELP localspec:generation_tokens_total Tokens generated.\n"
        "localspec:generation_tokens_total 128.0\n"
        "localspec:simulated_seconds 0.25\n"
        'localspec:target_passes{requests="2"} 7.0\n'
        "process_cpu_seconds_total 3.0\n"
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            got = counters(httpd.server_address[1])
        finally:
            httpd.shutdown()
    assert got == {"localspec:generation_tokens": 128.0, "localspec:simulated_seconds": 0.25}


def test_first_runs_end_to_end_on_the_tiny_pair(tiny: TinyModels, tmp_path: Path) -> None:
    """The harness as a benchmark uses it: separate `run` processes with empty caches, modes
    interleaved, the table of paired ratios and the rows as JSON."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "writing", "turns": ["hello there"]}) + "\n")
    out = tmp_path / "rows.json"
    args = [str(tiny.target), "--draft", str(tiny.close), "--prompts", str(prompts), "-n", "8"]
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks.wait.first_runs", *args, "--modes", "fixed-4", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "| writing | 1.00x |" in res.stdout and "| all | 1.00x |" in res.stdout
    rows = json.loads(out.read_text())
    assert [r["mode"] for r in rows] == ["baseline", "fixed-4"]
    assert rows[0]["n_drafted"] == 0 < rows[1]["n_drafted"]
