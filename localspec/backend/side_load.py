"""A draft model loaded on a thread of its own while its target loads on the caller's.

llama.cpp's loading runs in C with the GIL released (mapping the weights, building the context and its
buffers), so two loads on a CPU overlap: on the project's 2-core CPU the demo pair's two loads took
0.65-0.73 s one after the other and 0.29-0.41 s side by side (benchmarks/RESULTS.md), time every
`run` waits before its first token. Only where neither model goes to a GPU or an RPC server: the
loads are separate llama.cpp models, but no GPU backend here has been tried loading two at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import llama_cpp

from localspec.backend.model import Model


class SideLoad:
    """`make()` running on a thread of its own from construction; `result` waits for it."""

    def __init__(self, make: Callable[[], Model]) -> None:
        # Once, on this thread: two first calls at once would both register ggml's backends.
        llama_cpp.llama_backend_init()
        self._model: Model | None = None
        self._error: BaseException | None = None
        self.done_at = 0.0  # time.perf_counter() when the load ended
        self._thread = threading.Thread(target=self._run, args=(make,), name="draft-load", daemon=True)
        self._thread.start()

    def _run(self, make: Callable[[], Model]) -> None:
        try:
            self._model = make()
        except BaseException as e:  # raised on the caller's thread by result()
            self._error = e
        finally:
            self.done_at = time.perf_counter()

    def result(self) -> Model:
        """The loaded model, once its load has ended (its error, raised here, if it failed)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._model is not None
        model, self._model = self._model, None
        return model

    def discard(self) -> None:
        """Wait for the load to end and close what it loaded (the caller failed, or loads again)."""
        self._thread.join()
        if self._model is not None:
            self._model.close()
            self._model = None
