from pathlib import Path

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
