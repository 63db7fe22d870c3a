"""The inputs of some of the target's layers, which drafters trained for one target read (an
EAGLE-3 head, a DFlash block drafter): llama-ext.h's setter and getter, bound by ctypes under their
C++ names, and the rows they hand out kept by position as the target's passes leave them."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import llama_cpp as bindings

from localspec.backend.hidden import HiddenRows
from localspec.errors import LocalspecError


def _symbol(names: Sequence[str], argtypes: list[Any], restype: Any) -> Any:
    """A libllama function exported from llama-ext.h, under its C++ name on each platform."""
    for name in names:
        function = getattr(bindings._lib, name, None)
        if function is not None:
            function.argtypes, function.restype = argtypes, restype
            return function
    raise LocalspecError(
        "this llama.cpp build exports no layer inputs (EAGLE-3 and DFlash drafters need llama-ext.h's)"
    )


@functools.cache
def _layer_functions() -> tuple[Any, Any]:
    """The setter and getter, found on first use: a build without them fails where a drafter that
    reads layer inputs is asked for, not wherever localspec is imported."""
    ctx = llama_cpp.llama_context_p_ctypes
    setter = _symbol(
        (
            "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
            "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z",
        ),
        [ctx, ctypes.c_uint32, ctypes.c_bool],
        None,
    )
    getter = _symbol(
        (
            "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
            "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z",
        ),
        [ctx, ctypes.c_uint32],
        ctypes.POINTER(ctypes.c_float),
    )
    return setter, getter


def hand_out_layer_inputs(ctx: Any, layers: Sequence[int]) -> None:
    """Make every later pass of `ctx` hand out the inputs of `layers`."""
    setter, _ = _layer_functions()
    for layer in layers:
        setter(ctx, layer, True)


def joined_layer_inputs(ctx: Any, layers: Sequence[int], n: int, width: int) -> np.ndarray:
    """The inputs of `layers` (each `width` wide) for the n tokens of `ctx`'s last pass, side by
    side: one (n, len(layers) * width) row a token, as the drafters' encoders take them."""
    _, getter = _layer_functions()
    return np.concatenate(
        [np.ctypeslib.as_array(getter(ctx, layer), shape=(n, width)) for layer in layers], axis=1
    )


class LayerInputs(HiddenRows):
    """The joined inputs of `layers` of each of the target's passes' tokens, by position."""

    def __init__(self, layers: Sequence[int], n_embd_target: int) -> None:
        super().__init__(len(layers) * n_embd_target)
        self.layers, self.n_embd_target = tuple(layers), n_embd_target

    def _rows(self, ctx: Any, n: int) -> np.ndarray:
        return joined_layer_inputs(ctx, self.layers, n, self.n_embd_target)
