"""`localspec serve`: the OpenAI-compatible server (localspec/server/)."""

from __future__ import annotations

import errno
import signal
import socket
from typing import Annotated

import typer

from localspec.backend.endpoints import is_loopback
from localspec.cli.options import (
    SETTINGS,
    DraftOpt,
    ModelOpt,
    VerboseOpt,
    fail,
    request,
    takes_settings,
    user_errors,
)
from localspec.config.about import SAMPLING, SERVER
from localspec.config.user_config import API_KEY_ENV
from localspec.server.request_body import DEFAULT_MAX_BODY
from localspec.server.request_log import LOG_FORMATS


def _one_of(choices: tuple[str, ...]):  # noqa: ANN202
    def check(value: str) -> str:
        if value not in choices:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return check


UNTIL_CONTEXT = 2**31 - 1  # a reply's default limit: until it ends or the context is full


@takes_settings(serving=True)
def serve(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on; anything but loopback exposes the server to the network.",
            rich_help_panel=SERVER,
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            "--port",
            min=0,
            max=65535,
            help="Port (0: any free one, printed at start).",
            rich_help_panel=SERVER,
        ),
    ] = 8080,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            metavar="KEY",
            envvar=API_KEY_ENV,
            help="Require `Authorization: Bearer KEY` on every endpoint but /health (or set "
            "LOCALSPEC_API_KEY).",
            rich_help_panel=SERVER,
        ),
    ] = None,
    max_queue: Annotated[
        int,
        typer.Option(
            "--max-queue",
            min=0,
            help="Requests that may wait while one generates; beyond: 503 with Retry-After.",
            rich_help_panel=SERVER,
        ),
    ] = 16,
    max_body: Annotated[
        float,
        typer.Option(
            "--max-body",
            metavar="MB",
            min=0.001,
            help="Largest request body in MiB; a larger one gets 413.",
            rich_help_panel=SERVER,
        ),
    ] = DEFAULT_MAX_BODY / 2**20,
    cors: Annotated[
        list[str] | None,
        typer.Option(
            "--cors",
            metavar="ORIGIN",
            help="Allow browser requests from this origin (repeatable; '*' for any).",
            rich_help_panel=SERVER,
        ),
    ] = None,
    alias: Annotated[
        str | None,
        typer.Option(
            "--alias",
            metavar="NAME",
            help="The model's name in /v1/models and in replies (default: the alias given to -m, or the "
            "file's name); a request may name any model.",
            rich_help_panel=SERVER,
        ),
    ] = None,
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            metavar="|".join(LOG_FORMATS),
            callback=_one_of(LOG_FORMATS),
            help="One line per request on stderr: text, or json (an object a line).",
            rich_help_panel=SERVER,
        ),
    ] = "text",
    shutdown_timeout: Annotated[
        float,
        typer.Option(
            "--shutdown-timeout",
            min=0,
            help="On SIGINT/SIGTERM, seconds the generation under way may take to finish before it is "
            "cancelled.",
            rich_help_panel=SERVER,
        ),
    ] = 10.0,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "-n",
            "--max-tokens",
            min=1,
            help="Most tokens of a reply whose request sets no limit (default: until it ends or the "
            "context is full).",
            rich_help_panel=SAMPLING,
        ),
    ] = None,
    cost_profile: Annotated[
        str | None,
        typer.Option(
            "--cost-profile",
            metavar="PROFILE",
            help="Measure another machine's decisions here: every pass is charged what this profile says "
            "it costs (gpu[:R], cpu, drift[:PROFILE] or a FILE.json, as bench's), and /metrics adds "
            "localspec:simulated_seconds. Replies come at this machine's speed.",
            rich_help_panel=SERVER,
        ),
    ] = None,
    flags: dict = SETTINGS,
    verbose: VerboseOpt = False,
) -> None:
    """Serve the model over an OpenAI-compatible API, speculating on every request.

    Endpoints: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics."""
    import uvicorn

    from localspec.bench.profiles import load_profile
    from localspec.cli.views.loading import loading
    from localspec.server.app import ServeConfig, Server
    from localspec.session.loader import load
    from localspec.session.model_files import names_file
    from localspec.session.simulated import simulate

    notify = lambda m: typer.echo(m, err=True)  # noqa: E731
    with user_errors():
        files, settings = request(model, draft, flags, notify, max_tokens=UNTIL_CONTEXT)
        profile = load_profile(cost_profile) if cost_profile else None
        sock = _listen(host, port)
        if settings.lookup_via == "suffix" and settings.suffix_cache and not is_loopback(host):
            # What one client generated would speed up (and so show through the timing of) another's.
            notify(
                f"the suffix cache is off on {host}: clients could tell what others generated from "
                "response times"
            )
            settings = settings.merged({"suffix_cache": False})
        with loading(files):
            loaded = load(files, settings, verbose=verbose, serving=True, notify=notify, scope=api_key)
        if profile is not None:
            simulate(loaded, profile)
    if not is_loopback(host) and api_key is None:
        notify(
            f"warning: listening on {host} with no --api-key: anyone who can reach this port can use the "
            "model"
        )
    files = loaded.files
    # An alias, or the file's name
    model_id = alias or (model if model and not names_file(model) else files.model.name)
    config = ServeConfig(
        settings=settings,
        model_id=model_id,
        api_key=api_key,
        cors=tuple(cors or ()),
        max_queue=max_queue,
        max_body=int(max_body * 2**20),
        log_format=log_format,
        cost_profile=profile.name if profile is not None else None,
    )
    server = Server(loaded, config)
    bound_host, bound_port = sock.getsockname()[:2]
    drafter = loaded.engine.drafter_name
    # The scheduler cancels what runs past the grace period, and its client is answered; uvicorn's
    # own limit, later, is only a backstop for a connection that still would not close.
    uv = _uvicorn(
        uvicorn.Config(
            server.app(),
            log_level="debug" if verbose else "warning",
            lifespan="off",
            timeout_graceful_shutdown=shutdown_timeout + 5,
            access_log=verbose,
        ),
        on_stop=lambda again: _stop(server.scheduler, shutdown_timeout, again, notify),
        # Said once it listens with its signal handlers in place: a client (or a test) may act on it.
        on_ready=lambda: notify(
            f"serving {model_id} (drafting: {drafter}, {settings.draft_mode}"
            f"{f'; costs simulated: {config.cost_profile}' if config.cost_profile else ''}) on "
            f"http://{_url_host(bound_host)}:{bound_port}/v1 - Ctrl-C to stop"
        ),
    )
    if hasattr(signal, "SIGHUP"):  # a closed terminal or a supervisor's reload: a graceful stop, as SIGTERM
        signal.signal(signal.SIGHUP, lambda _sig, frame: uv.handle_exit(signal.SIGTERM, frame))
    try:
        uv.run(sockets=[sock])
    finally:
        server.scheduler.stop()
        loaded.cancel.set()  # whatever still generates stops within a step
        server.scheduler.join(timeout=30)
        loaded.close()
    notify("stopped")


def _uvicorn(config, on_stop, on_ready):  # noqa: ANN001, ANN202 -- uvicorn's own types, imported late (help stays fast)
    """uvicorn's server, answering the queued requests on SIGINT/SIGTERM and then ending with exit
    code 0 (uvicorn itself re-raises the signal once it has shut down)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list | None = None) -> None:
            await super().startup(sockets)
            on_ready()

        def handle_exit(self, sig: int, frame: object) -> None:
            # A second Ctrl-C cancels the generation, whose stream then ends as it should (an error
            # event, [DONE]); uvicorn's own force_exit would cut it with a traceback.
            on_stop(self.should_exit and sig == signal.SIGINT)
            self.should_exit = True

    return Server(config)


def _stop(scheduler, grace: float, again: bool, notify) -> None:  # noqa: ANN001 -- Scheduler, imported late
    """On SIGINT/SIGTERM: say what the server waits for, and on a second Ctrl-C wait no more."""
    if again:
        if scheduler.cancel_running():
            notify("cancelling the generation under way")
        return
    if scheduler.running:
        notify(
            f"stopping: the generation under way may finish for up to {grace:g} s (Ctrl-C again to cancel "
            "it now)"
        )
    scheduler.stop(grace=grace)


def _listen(host: str, port: int) -> socket.socket:
    """Bind before loading the models, so that a taken port fails at once with one line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise fail(f"cannot listen on {host}: {e.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        why = "the port is in use" if e.errno == errno.EADDRINUSE else e.strerror
        raise fail(f"cannot listen on {host}:{port}: {why}") from None
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
