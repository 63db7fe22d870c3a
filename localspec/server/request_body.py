"""A request's body as the server reads it: bounded in size and nesting, its text valid Unicode.

Without bounds a 50 MB body grew the server by 5 GB before the answer, a body nested a few
thousand deep raised RecursionError (a 500), and a lone surrogate (`"\\ud800"`, valid JSON) raised
UnicodeEncodeError in the tokenizer (a 500)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from localspec.server.api_error import ApiError
from localspec.text_input import without_surrogates

if TYPE_CHECKING:  # Starlette is a tenth of a second to import: `run` and `chat` never need it
    from starlette.requests import Request

DEFAULT_MAX_BODY = 8 * 2**20  # a full 128k-token context is ~0.5 MB of text
MAX_DEPTH = 64  # tool schemas nest a few levels; a template or a grammar recurses over them
DRAIN_LIMIT = 2**30  # past this a body is not even read to its end: the connection is closed


async def read_body(request: Request, limit: int) -> tuple[Any, int]:
    """The parsed body and how many of its strings held lone surrogates (replaced with U+FFFD).
    Raises ApiError: 413 over `limit` bytes, 400 for what is not JSON or nests too deeply."""
    chunks, size = [], 0
    stream = request.stream()  # one stream: Starlette refuses a second
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            await _drain(stream, size)
            raise ApiError(413, f"the request body is over {limit:,} bytes (the server's --max-body)")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks))
    except RecursionError:
        raise _too_deep() from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    replaced = [0]
    return _cleaned(body, 0, replaced), replaced[0]


async def _drain(stream: AsyncIterator[bytes], size: int) -> None:
    """Read the rest without keeping it, so that the client, still sending, gets the answer."""
    async for chunk in stream:
        size += len(chunk)
        if size > DRAIN_LIMIT:
            return


def _too_deep() -> ApiError:
    return ApiError(400, f"the request body nests deeper than {MAX_DEPTH} levels")


def _cleaned(value: Any, depth: int, replaced: list[int]) -> Any:
    if isinstance(value, str):
        return _text(value, replaced)
    if isinstance(value, (dict, list)) and depth >= MAX_DEPTH:
        raise _too_deep()
    if isinstance(value, dict):
        return {_text(k, replaced): _cleaned(v, depth + 1, replaced) for k, v in value.items()}
    if isinstance(value, list):
        return [_cleaned(v, depth + 1, replaced) for v in value]
    return value


def _text(s: str, replaced: list[int]) -> str:
    out = without_surrogates(s)
    replaced[0] += out is not s
    return out
