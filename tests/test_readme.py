import json
import os
from pathlib import Path

from cli_helpers import localspec

from localspec.engine.controller import TRIAL_LENGTH, TRIAL_STEPS

ROOT = Path(__file__).parent.parent


def setup_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    blocks, inside = [], False
    for line in lines:
        if line.startswith("```"):
            inside = not inside
            continue
        if inside:
            blocks.append(line)
        elif blocks and len(blocks) == 2:
            break
    return blocks[:2]


def test_readme_opens_with_install_and_test_commands():
    run_cmd, test_cmd = setup_commands()
    assert "pip install" in run_cmd and "localspec run" in run_cmd
    assert "pip install" in test_cmd and "pytest" in test_cmd


def test_ci_runs_the_readme_test_command():
    _, test_cmd = setup_commands()
    assert test_cmd in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_first_command_drafts_with_the_demo_pair(tmp_path: Path):
    """The README's first command, on a fresh cache: the demo pair is made and its draft drafts
    what the target takes. Counts, not speeds: how many steps `auto` lets the draft draft follows
    the machine's timings (CI saw it pause the draft after its trial on a noisy stretch); the share
    of a greedy draft the target accepts moves only with which positions were drafted, well clear
    of the bound below. The trial is owed whatever the timings say, a short prompt having nothing
    to weigh before the draft reads it (controller.py: TRIAL_STEPS of TRIAL_LENGTH tokens)."""
    run_cmd, _ = setup_commands()
    prompt = run_cmd.split("localspec run -p ")[1].strip().strip('"')
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    res = localspec("run", "-p", prompt, "-n", "96", "--temp", "0", "--json", env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["model_files"]["target"].endswith(".gguf") and "F32" in out["model_files"]["target"]
    assert out["model_files"]["draft"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    draft = out["stats"]["drafters"]["draft-model"]
    assert draft["drafted"] >= TRIAL_STEPS * TRIAL_LENGTH, out["stats"]
    # The same model quantized: greedy, the target takes most of what it drafts (0.84-0.89 seen).
    assert draft["accepted"] >= 0.6 * draft["drafted"], out["stats"]
