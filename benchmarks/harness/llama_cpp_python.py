"""llama-cpp-python's own generation (`Llama.create_completion`, its sampling in C) on the same
tokens: the peer a Python tool on llama.cpp is measured against."""

from __future__ import annotations

import time

from llama_cpp import Llama


def stream_rate(llm: Llama, tokens: list[int], n: int, **sampling: object) -> tuple[float, str]:
    """(tokens/s after the first token, the text) of a streamed completion of `tokens`: the first
    token comes after the prompt's evaluation, so the rate is generation's alone."""
    llm.reset()
    first, count, text = None, 0, []
    for chunk in llm.create_completion(tokens, max_tokens=n, stream=True, repeat_penalty=1.0, **sampling):
        count += 1
        text.append(chunk["choices"][0]["text"])
        if first is None:
            first = time.perf_counter()
    rate = (count - 1) / (time.perf_counter() - first) if first and count > 1 else 0.0
    return rate, "".join(text)
