"""The arguments benchmarks share, each spelled once. A script builds its parser from these and
adds only what it alone takes; `parse` refuses a missing model, prompt file or native folder in
one line before anything runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

# Arguments naming inputs that must exist before a run starts
INPUTS = ("target", "draft", "prompts", "native", "testbed")


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser whose help is the script's docstring, as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def csv(kind: Callable[[str], object]) -> Callable[[str], list]:
    """An argparse type for comma-separated values of `kind` ("2,4,8")."""

    def parse(text: str) -> list:
        try:
            return [kind(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}") from None

    return parse


def add_target(ap: argparse.ArgumentParser, optional: bool = False) -> None:
    help_ = "the target GGUF" + (" (default: the demo pair, as `localspec run` alone)" if optional else "")
    ap.add_argument("target", type=Path, nargs="?" if optional else None, help=help_)


def add_draft(ap: argparse.ArgumentParser, required: bool = False) -> None:
    ap.add_argument("--draft", type=Path, required=required, help="the draft model's GGUF")


def add_testbed(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("testbed", type=Path, help="the folder ../shared/bench/make_testbed.py wrote")


def add_prompts(ap: argparse.ArgumentParser, limit: int = 1, required: bool = True) -> None:
    """Spec-Bench rows (../shared/bench/specbench-dev.jsonl): --limit per --category (all categories
    when none is given)."""
    ap.add_argument("--prompts", type=Path, required=required, help="a Spec-Bench JSONL file")
    ap.add_argument("--category", action="append", default=[], help="only this category (repeatable)")
    ap.add_argument("--limit", type=int, default=limit, help="prompts per category")


def add_generation(ap: argparse.ArgumentParser, n: int = 128, temp: bool = True) -> None:
    ap.add_argument("-n", type=int, default=n, help="tokens to generate")
    if temp:
        ap.add_argument("--temp", type=float, default=0.0)


def add_repeat(ap: argparse.ArgumentParser, default: int = 1) -> None:
    ap.add_argument("--repeat", type=int, default=default, help="passes over the prompts, interleaved")


def add_native(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--native",
        type=Path,
        required=True,
        help="native llama.cpp's tools (../shared/bench/build_native.sh)",
    )


def add_busy(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--busy", action="store_true", help="keep one core busy with another process throughout")


def add_json(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", type=Path, help="also write every row here")


def add_extra(ap: argparse.ArgumentParser, what: str) -> None:
    """Options after `--` go on to `localspec` as they are (`extra`)."""
    ap.set_defaults(extra=[])
    ap.epilog = f"Options after -- go to {what} as they are."


def parse(ap: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments, every input they name checked to exist (otherwise one line and exit 2); what
    follows `--` is `extra` where the script took add_extra."""
    argv, extra = sys.argv[1:] if argv is None else argv, []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    a = ap.parse_args(argv)
    if extra:
        if not hasattr(a, "extra"):
            ap.exit(2, f"{ap.prog}: takes no options after --\n")
        a.extra = extra
    for name in INPUTS:
        path = getattr(a, name, None)
        if isinstance(path, Path) and not path.exists():
            ap.exit(2, f"{ap.prog}: {name} {path} does not exist\n")
    return a
