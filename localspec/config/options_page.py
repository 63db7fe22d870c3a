"""docs/options.md, written from the settings record: every setting once, with each name it goes by
(flag, config key and LOCALSPEC_* variable, chat's /set, a server request's field), its default and
when it may change. A test holds the page to the record; after changing a setting, regenerate it:

    python -m localspec.config.options_page > docs/options.md
"""

from __future__ import annotations

from localspec.config.about import DRAFTING, LOAD, MODEL, PERFORMANCE, SAMPLING, SERVER
from localspec.config.settings import FIELDS, Settings
from localspec.config.user_config import ENV_PREFIX

PANELS = (SAMPLING, MODEL, PERFORMANCE, DRAFTING, SERVER)

HEADER = """# Options

Generated from the settings record (`localspec/config/settings.py` and the three records it joins)
by `python -m localspec.config.options_page`; a test keeps it equal to the record. Every setting has
one name per front end: a flag of `run`, `chat`, `bench` and `serve` (the Server ones: `serve`
alone), a key of `config.toml` and a `LOCALSPEC_*` variable, a `/set` key in `chat` (those that may
change between generations; the others are fixed when the models load), and a field of a server
request (where one is listed). Each command's
own options (`-p`, `--json`, `serve`'s `--port`, ...) are in its `--help`.

Precedence, highest first: a flag, a `LOCALSPEC_*` variable, the command's own defaults (`bench`'s
greedy `--temp 0`), an alias's recommended settings, `config.toml`, the defaults below.
"""


def _default(name: str) -> str:
    value = getattr(Settings(), name)
    if value is None or value == ():
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`"


def _row(name: str) -> str:
    about = FIELDS[name]
    flags = ", ".join(f"`{f}`" for f in (about.flag, *about.short))
    change = "at load" if about.phase == LOAD else f"`/set {about.key}`"
    api = f"`{about.api}`" if about.api else "-"
    names = f"`{name}`, `{ENV_PREFIX}{name.upper()}`"
    text = about.help.replace("|", "\\|")
    return f"| {flags} | {_default(name)} | {change} | {names} | {api} | {text} |"


def page() -> str:
    """The whole of docs/options.md."""
    parts = [HEADER]
    for panel in PANELS:
        names = [n for n, about in FIELDS.items() if about.panel == panel]
        parts.append(f"\n## {panel}\n")
        parts.append("| flag | default | in chat | config key, variable | request field | what it does |")
        parts.append("| --- | --- | --- | --- | --- | --- |")
        parts.extend(_row(n) for n in names)
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(page(), end="")
