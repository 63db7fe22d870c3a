"""The package's shape: imports go one way, nothing imports in a cycle, no module grows past 300
lines, and the backend knows no command-line flag."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import localspec

ROOT = Path(localspec.__file__).parent
# Top to bottom: a module may import from its own layer and the layers below it, never above.
LAYERS = [
    ("cli", ("localspec.cli", "localspec.__main__")),
    ("server", ("localspec.server",)),
    ("bench", ("localspec.bench",)),  # modes, prompts, the tie rule, cost profiles: only bench and tests
    ("session", ("localspec.session",)),  # loading, conversations, prompts, settings to engine config
    ("registry", ("localspec.registry",)),  # aliases, the Hub, pulled files
    ("datastore", ("localspec.datastore",)),  # the user's files, indexed for suffix drafting
    ("engine", ("localspec.engine",)),
    ("drafters", ("localspec.drafters",)),
    ("sampling", ("localspec.sampling",)),
    ("config", ("localspec.config",)),  # the settings record, the user's config, defaults
    ("backend", ("localspec.backend",)),  # llama.cpp, GGUF files, devices, the machine
    ("foundation", ("localspec.errors", "localspec.json_file", "localspec.text_input", "localspec")),
]
MAX_LINES = 300
TOP_LEVEL = 3  # modules loose at the top of the package (besides __init__ and __main__)
MAX_FUNCTION_LINES = 60  # in engine/: a step of the loop reads in one sitting


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The localspec modules a file imports, at any depth (function-level imports included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` names a module; `from module import name` does not.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n if n in MODULES else node.module for n in names]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == "localspec")
    return found


def layer(module: str) -> int:
    best = max(
        (
            (len(prefix), i)
            for i, (_, prefixes) in enumerate(LAYERS)
            for prefix in prefixes
            if module == prefix or module.startswith(prefix + ".")
        ),
    )
    return best[1]


GRAPH = {m: imports(p) - {m} for m, p in MODULES.items()}


def test_every_module_has_a_layer():
    for module in MODULES:
        layer(module)


def test_imports_go_one_way():
    upward = [
        f"{m} ({LAYERS[layer(m)][0]}) imports {dep} ({LAYERS[layer(dep)][0]})"
        for m, deps in GRAPH.items()
        for dep in deps
        if layer(dep) < layer(m)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for dep in sorted(GRAPH.get(m, ())):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(dep) :], dep]))
            if dep not in state:
                visit(dep, [*path, dep])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])


def test_no_module_is_longer_than_300_lines():
    long = {
        m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, long


def test_few_modules_sit_at_the_top():
    loose = sorted(p.name for p in ROOT.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(loose) <= TOP_LEVEL, loose


def test_the_settings_record_stands_below_the_engine():
    below = [dep for dep in GRAPH["localspec.config.settings"] if layer(dep) <= layer("localspec.drafters")]
    assert not below, below


def long_functions(path: Path, limit: int) -> dict[str, int]:
    """Functions (methods included) of more than `limit` lines, decorators and docstrings counted."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > limit
    }


def test_no_engine_function_is_longer_than_60_lines():
    long = {
        f"{m}.{name}": n
        for m, p in MODULES.items()
        if m.startswith("localspec.engine")
        for name, n in long_functions(p, MAX_FUNCTION_LINES).items()
    }
    assert not long, long


def test_the_backend_names_no_command_line_flag():
    for m, path in MODULES.items():
        if m.startswith("localspec.backend"):
            assert not re.search(r"[\"'`]--[a-z]", path.read_text(encoding="utf-8")), m


def test_the_checks_see_a_violation():
    """The walk finds imports at every depth and the layering catches one that goes up."""
    deps = imports(ROOT / "cli" / "run.py")
    assert "localspec.session.loader" in deps  # imported inside the command function
    assert layer("localspec.drafters.tree") > layer("localspec.engine.controller")
    assert layer("localspec.engine.speculative") < layer("localspec.backend.model")


def test_llama_cpps_libraries_load_before_numpys():
    """Any module of the package, imported first, has llama.cpp's libraries loaded before NumPy's
    (a CUDA build segfaulted loading models the other way round: localspec/__init__.py)."""
    probe = (
        "import sys, localspec.sampling.dist; m = list(sys.modules); "
        "print(m.index('llama_cpp.llama_cpp') < m.index('numpy'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
