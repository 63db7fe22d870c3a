"""`localspec config`: the defaults in force, and where each comes from."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from localspec.cli.options import DraftOpt, ModelOpt, user_errors
from localspec.config.defaults import DEMO_NAME


def config(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object instead of a table.")] = False,
) -> None:
    """Show the settings run, chat and bench start from and where each comes from: a flag over
    LOCALSPEC_* variables over an alias's recommendations over the config file over the built-in
    defaults (bench has defaults of its own below the variables)."""
    from rich.console import Console

    from localspec.cli.views.plain import say, table
    from localspec.config.settings import FIELDS, typed
    from localspec.config.user_config import (
        config_path,
        layered,
        pick,
        precedence,
        read_config,
        read_env,
    )
    from localspec.session.model_files import demo_files, resolve

    with user_errors():
        file, env = read_config(), read_env()
        model_given, model_source = pick("model", model, env, file)
        draft_given, draft_source = pick("draft", draft, env, file)
        files, recommended = resolve(model_given, draft_given, lambda _m: None)
        model_source = model_source or "built-in"
        draft_source = draft_source or (
            "-" if not files.draft else "built-in: the demo's Q4_1" if files.demo else "alias"
        )
        values = layered(precedence(file, recommended, env))
        # The demo runs an F32 made from the shipped Q4_1, which drafts it: name what runs.
        target = demo_files()[1] if files.demo else files.model
    about = (
        f"the demo target, {DEMO_NAME} in F32" + ("" if target.is_file() else ", made on first use")
        if files.demo
        else None
    )
    out = {
        "config_file": str(config_path()),
        "config_file_exists": config_path().exists(),
        "model": {"value": str(target), "from": model_source, "about": about},
        "draft": {"value": files.draft_name, "from": draft_source},
        "settings": {
            name: {"value": list(v) if isinstance(v, tuple) else v, "from": src}
            for name, (v, src) in values.items()
        },
    }
    if json_out:
        typer.echo(json.dumps(out))
        return
    console = Console()
    say(console, f"config file: {out['config_file']}" + ("" if out["config_file_exists"] else " (none yet)"))
    say(console, f"model: {target} (from {model_source}{f': {about}' if about else ''})")
    say(console, f"draft: {out['draft']['value'] or 'none'} (from {draft_source})")
    rows = [
        (name, FIELDS[name].flag, f"LOCALSPEC_{name.upper()}", typed(value), source)
        for name, (value, source) in values.items()
    ]
    console.print(table("settings", ("setting", "flag", "environment variable", "value", "from"), rows))
