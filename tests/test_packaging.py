"""What a non-editable install holds: every package found (none listed by hand, so none left out),
every file the code opens through importlib.resources declared as package data, and the floors the
wheel smoke test installs (.ci/floors.txt) the ones pyproject.toml states."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import localspec

ROOT = Path(__file__).parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE = Path(localspec.__file__).parent


def test_packages_are_found_not_listed():
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert "packages" not in setuptools or set(setuptools["packages"]) == {"find"}, "list no packages by hand"
    assert setuptools["packages"]["find"]["include"] == ["localspec*"]
    folders = {p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    assert all((folder / "__init__.py").is_file() for folder in folders), (
        "a folder of modules without __init__.py is no package to find"
    )


def test_every_file_opened_as_a_resource_is_package_data():
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    opened = set()
    for path in PACKAGE.rglob("*.py"):
        for package, name in re.findall(
            r'resources\.files\("([\w.]+)"\)\.joinpath\("([^"]+)"\)', path.read_text()
        ):
            opened.add((package, name))
            assert name in data.get(package, []), f"{package}/{name} is opened but not package data"
            file = PACKAGE.parent.joinpath(*package.split("."), name)
            assert file.is_file() and not file.is_symlink(), (
                f"{file}: a real file (a symlink is text on Windows checkouts)"
            )
    assert len(opened) >= 3


def test_the_smoke_tests_floors_are_pyprojects():
    floors = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            floors[name] = version
    stated = {}
    for requirement in PYPROJECT["project"]["dependencies"]:
        name, lowest = re.match(r"([\w-]+)>=([\w.]+)", requirement).groups()  # type: ignore[union-attr]
        stated[name] = lowest
    assert set(floors) == set(stated)
    for name, lowest in stated.items():
        padded = lambda v: tuple(int(x) for x in v.split("."))[:3] + (0,) * (3 - len(v.split(".")))  # noqa: E731
        assert padded(floors[name]) == padded(lowest), (
            f"{name}: pyproject says >={lowest}, floors.txt tests {floors[name]}"
        )
