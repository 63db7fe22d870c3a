"""Errors meant for the user: the CLI prints their message on one line and exits non-zero."""


class LocalspecError(Exception):
    """A problem with the user's input or environment, reported without a traceback."""

    exit_code = 1
