"""`localspec chat`: a multi-turn conversation with live speculative decoding."""

from __future__ import annotations

import secrets
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from localspec.cli.options import (
    SETTINGS,
    DraftOpt,
    ModelOpt,
    ShowAcceptedOpt,
    VerboseOpt,
    request,
    signals_interrupt,
    signals_stop,
    takes_settings,
    user_errors,
)
from localspec.config.defaults import DEFAULT_VERIFY
from localspec.config.settings import FIELDS, PER_GENERATION
from localspec.errors import LocalspecError
from localspec.text_input import from_arg

HELP = f"""commands:
  /help                 this help
  /stats                session totals: tokens, acceptance, tok/s
  /set                  the settings /set may change, with their values
  /set KEY VALUE        change one for the next replies: {", ".join(FIELDS[n].key for n in PER_GENERATION)}
  /system TEXT          set the system prompt (keeps the conversation)
  /reset                forget the conversation
  /save FILE            save the conversation as JSON
  /load FILE            load a saved conversation
  /exit, /quit, /bye    leave (Ctrl-D too)
  \"\"\"                   start and end a multi-line message
Ctrl-C stops a reply; at an empty prompt it leaves."""
MULTILINE = '"""'


def _read_message(prompt: str) -> str | None:
    """One message from the user; None at end of input. Ctrl-C at an empty prompt ends too."""
    try:
        first = from_arg(input(prompt), "the message")
    except EOFError:
        return None
    except KeyboardInterrupt:
        try:
            import readline

            pending = readline.get_line_buffer()
        except ImportError:
            pending = ""
        if pending.strip():
            print()
            return ""
        return None
    if not first.lstrip().startswith(MULTILINE):
        return first
    lines = [first.lstrip()[len(MULTILINE) :]]
    if lines[0].rstrip().endswith(MULTILINE) and lines[0].strip() != "":
        return lines[0].rstrip()[: -len(MULTILINE)]
    while True:
        try:
            line = from_arg(input("... "), "the message")
        except (EOFError, KeyboardInterrupt):
            return "\n".join(lines).strip("\n")
        if line.rstrip().endswith(MULTILINE):
            lines.append(line.rstrip()[: -len(MULTILINE)])
            return "\n".join(lines).strip("\n")
        lines.append(line)


def last_conversation_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_state_dir("localspec")) / "last_conversation.json"


def _setup_history() -> Callable[[], None]:
    """Arrow-key history through readline, kept between sessions when the state dir is writable."""
    try:
        import readline
    except ImportError:
        return lambda: None
    import platformdirs

    path = Path(platformdirs.user_state_dir("localspec")) / "chat_history"
    try:
        readline.read_history_file(path)
    except OSError:
        pass

    def save() -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.set_history_length(1000)
            readline.write_history_file(path)
        except OSError:
            pass

    return save


@takes_settings()
def chat(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    system: Annotated[str | None, typer.Option("--system", help="System prompt.")] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the last conversation (kept before every reply).")
    ] = False,
    flags: dict = SETTINGS,
    show_accepted: ShowAcceptedOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Chat with the model; the conversation stays in the KV caches of target and draft."""
    from rich.console import Console

    from localspec.cli.views.loading import loading
    from localspec.cli.views.plain import say
    from localspec.cli.views.render import fit, render_plain, summary_line
    from localspec.cli.views.tui import LiveRenderer
    from localspec.session.conversation import ChatSession
    from localspec.session.loader import load
    from localspec.session.prompt import template_notice

    # Bytes that are not UTF-8 reach _read_message as surrogates, which from_arg replaces; without
    # this, input() would raise and end the session.
    sys.stdin.reconfigure(errors="surrogateescape")  # type: ignore[union-attr]
    console = Console()
    err = Console(stderr=True)
    notify = lambda m: say(err, (m, "yellow"))  # noqa: E731
    with user_errors():
        files, settings = request(model, draft, flags, seed=secrets.randbits(32))
        with loading(files):
            loaded = load(files, settings, verbose=verbose, notify=notify)
    system = from_arg(system, "--system") if system else None
    verify_chosen = flags.get("verify") is not None or settings.verify != DEFAULT_VERIFY
    name = loaded.model_name(files, model)
    session = ChatSession(
        loaded,
        settings,
        system,
        model_name=name,
        autosave=last_conversation_path(),
        verify_chosen=verify_chosen,
    )
    if resume:
        try:
            session.load(session.autosave)  # type: ignore[arg-type]
            if system:
                session.system = system
            notify(f"resumed the last conversation: {len(session.messages)} messages")
        except LocalspecError:
            notify("no earlier conversation to resume: starting a new one")
    save_history = _setup_history()
    interactive = sys.stdin.isatty()
    say(err, (f"chatting with {name} (drafter: {loaded.engine.drafter_name}); /help for commands", "dim"))
    notice = template_notice(loaded.target)
    if notice:
        say(err, (f"note: {notice}", "dim"))
    try:
        while True:
            with signals_interrupt():  # SIGTERM or SIGHUP at the prompt leave as Ctrl-C there does
                text = _read_message(">>> " if interactive else "")
            if text is None:
                if interactive:
                    err.print()  # Ctrl-D or Ctrl-C leave the cursor on the prompt line
                break
            if not text.strip():
                continue
            if text.startswith("/"):
                if _command(session, text, console, notify):
                    break
                continue
            try:
                with signals_stop(loaded.cancel) as stopped:
                    events = session.reply(text, notify)
                    done = (
                        LiveRenderer(console, show_accepted).render(events)
                        if console.is_terminal
                        else render_plain(events)
                    )
            except LocalspecError as e:
                say(err, (f"error: {e}", "red"))
                continue
            say(
                err,
                (
                    fit(summary_line(done.stats, done.stop_reason), err.width if err.is_terminal else None),
                    "dim",
                ),
            )
            if stopped.signal not in (None, signal.SIGINT):
                raise typer.Exit(stopped.exit_code)  # SIGTERM or SIGHUP: the session ends, history saved
        kept = " · `localspec chat --resume` continues it" if session.messages else ""
        say(err, (f"bye: {session.totals.describe()}{kept}", "dim"))
    finally:
        save_history()
        loaded.close()


def _command(session, text: str, console, notify) -> bool:
    """Run a /command; True means leave the chat."""
    name, _, arg = text.strip().partition(" ")
    arg = arg.strip()
    from localspec.cli.views.plain import say as say_to

    say = lambda m: say_to(console, m)  # noqa: E731
    try:
        if name in ("/exit", "/quit", "/bye"):
            return True
        if name == "/help":
            say(HELP)
        elif name == "/stats":
            say(session.totals.describe())
        elif name == "/set" and not arg:
            say("\n".join(session.current()))
        elif name == "/set":
            key, _, value = arg.partition(" ")
            say(session.set_option(key, value.strip()))
        elif name == "/system":
            session.system = arg or None
            say("system prompt " + ("set" if arg else "cleared"))
        elif name == "/reset":
            session.reset()
            say("conversation cleared")
        elif name in ("/save", "/load") and not arg:
            say(f"usage: {name} FILE")
        elif name == "/save":
            session.save(Path(arg).expanduser())
            say(f"saved to {arg}")
        elif name == "/load":
            session.load(Path(arg).expanduser())
            say(f"loaded {len(session.messages)} messages from {arg}")
        else:
            say(f"unknown command {name}; /help lists them")
    except LocalspecError as e:
        notify(f"error: {e}")
    return False
