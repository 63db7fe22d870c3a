"""Grammars: llama.cpp's grammar sampler through the bindings, asked which tokens it allows, and
llama-cpp-python's conversion of a JSON schema into GBNF."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import tempfile
from collections.abc import Sequence

import llama_cpp
import numpy as np
from llama_cpp.llama_grammar import json_schema_to_gbnf

from localspec.backend.grammar_limits import MAX_NESTING, gbnf_limit_problem, schema_limit_problem
from localspec.backend.logs import caught_logs
from localspec.errors import LocalspecError

# llama-cpp-python's converter lets a string hold raw control characters, which JSON forbids
# (llama.cpp's own converter excludes them): a model that writes a tab inside a string would emit
# JSON no parser reads.
_ANY_CHAR, _JSON_CHAR = r'char ::= [^"\\] |', r'char ::= [^"\\\x7F\x00-\x1F] |'
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


# A request's schema or grammar is checked where it is read, again by the settings record's
# validation on every merge, and converted for the engine: each text is worked on once.
@functools.lru_cache(maxsize=32)
def schema_grammar(schema: str) -> str:
    """The GBNF of a JSON schema (given as JSON text); ValueError naming what cannot be converted."""
    try:
        parsed = json.loads(schema)
    except json.JSONDecodeError as e:
        raise ValueError(f"is not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise ValueError(f"nests past the limit of {MAX_NESTING}") from None
    if not isinstance(parsed, dict):
        raise ValueError("must be a JSON object (a schema)")
    problem = schema_limit_problem(parsed)
    if problem:
        raise ValueError(problem)
    try:
        gbnf = json_schema_to_gbnf(json.dumps(parsed)).replace(_ANY_CHAR, _JSON_CHAR)
    except Exception as e:  # the converter's own checks are asserts, and others fail as they may
        raise ValueError(f"cannot be turned into a grammar: {str(e)[:200] or type(e).__name__}") from None
    problem = gbnf_problem(gbnf)  # the limits, then llama.cpp's parser, its complaints caught
    if problem:
        raise ValueError(f"becomes a grammar that {problem}")
    return gbnf


@functools.lru_cache(maxsize=32)
def gbnf_problem(gbnf: str) -> str | None:
    """Why llama.cpp's parser refuses `gbnf` (None: it parses, with a rule named root). The parser
    writes its reasons to the process's stderr and to llama.cpp's log, both caught for the while.
    A grammar past the limits is refused before the parser sees it (grammar_limits.py)."""
    problem = gbnf_limit_problem(gbnf)
    if problem:
        return problem
    with tempfile.TemporaryFile() as caught, caught_logs() as logged:
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)
        try:
            sampler = llama_cpp.llama_sampler_init_grammar(None, gbnf.encode(), b"root")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
            return None
        caught.seek(0)
        text = caught.read().decode("utf-8", "replace") + "".join(logged)
    said = [line.strip() for line in text.splitlines() if line.strip()]
    reason = None
    for i, line in enumerate(said):
        if "error parsing grammar:" in line:
            reason = line.split("error parsing grammar:", 1)[1].strip()
            if reason.endswith(" at"):  # the parser goes on with the text where it stopped
                rest = said[i + 1] if i + 1 < len(said) and "failed to parse" not in said[i + 1] else ""
                reason += f" {rest[:40]!r}" if rest else " the end"
            break
    if reason is None and any("root" in line for line in said):
        reason = "it has no rule named root"
    return f"is not a GBNF grammar llama.cpp parses: {reason or 'llama.cpp refused it'}"


class Grammar:
    """Where a grammar stands after the tokens accepted so far. `allowed` asks llama.cpp of a few
    candidates at a time: over a whole vocabulary its check costs 10-50 ms (49k tokens, this CPU),
    a pass's worth, so callers ask of the likeliest tokens first. Only an allowed token may be
    accepted: llama.cpp aborts the process on any other."""

    def __init__(self, sampler: ctypes.c_void_p) -> None:
        self._sampler = sampler

    @classmethod
    def compile(cls, vocab: ctypes.c_void_p, gbnf: str) -> Grammar:
        problem = gbnf_limit_problem(gbnf)  # checked where it was read too: this is the last gate
        if problem:
            raise LocalspecError(f"the grammar {problem}")
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        if not sampler:
            raise LocalspecError(f"the grammar {gbnf_problem(gbnf) or 'was refused by llama.cpp'}")
        return cls(sampler)

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """Whether each token of `ids` may come next."""
        data = np.zeros(len(ids), dtype=_TOKEN_DATA)
        data["id"] = ids
        array = llama_cpp.llama_token_data_array(
            data.ctypes.data_as(llama_cpp.llama_token_data_p), len(data), -1, False
        )
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        return np.isfinite(data["logit"])

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        """How many of a chain's first tokens the grammar allows, one after the other."""
        state = self.clone()
        try:
            for n, token in enumerate(tokens):
                if not state.allowed(np.array([token], dtype=np.int32))[0]:
                    return n
                state.accept(token)
            return len(tokens)
        finally:
            state.close()

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self._sampler, token)

    def clone(self) -> Grammar:
        return Grammar(llama_cpp.llama_sampler_clone(self._sampler))

    def close(self) -> None:
        if self._sampler:
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None  # type: ignore[assignment]

    def __del__(self) -> None:
        self.close()
