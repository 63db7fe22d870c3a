"""Turn user text into prompt tokens, through the model's own chat template when it has one."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from localspec.backend.model import Model
from localspec.errors import LocalspecError

Message = dict[str, Any]
# Used when a GGUF carries no chat template, by run and chat alike (llama.cpp falls back to ChatML too).
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def template_notice(model: Model) -> str | None:
    """What to tell the user when the model brings no chat template of its own."""
    if model.chat_template() is not None:
        return None
    return (
        f"{model.path.name} has no chat template: messages are rendered as ChatML (--raw sends a prompt "
        "as is)"
    )


def template_of(model: Model) -> str:
    return model.chat_template() or CHATML


@functools.lru_cache(maxsize=8)
def _formatter(template: str, eos: str, bos: str) -> Any:
    """A template compiled once: compiling takes ~10 ms, rendering a conversation ~0.03 ms."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)


def render_chat(model: Model, messages: Sequence[Message], tools: list[dict[str, Any]] | None = None) -> str:
    """The conversation rendered by the GGUF's chat template (ChatML when it has none), with the
    tools offered (OpenAI's `tools` entries) where the template takes them."""
    bos, eos, _ = model.bos_eos_text()
    try:
        return _formatter(template_of(model), eos, bos)(messages=list(messages), tools=tools).prompt
    except Exception as e:  # jinja2 raises template and runtime errors of many types
        raise LocalspecError(
            f"the model's chat template failed ({e}); use --raw to send the prompt as is"
        ) from None


# A text longer than this many characters a token of the context is first tokenized in part:
# tokenizing 10 MB takes ~5 s, and a prefix that alone overflows the context settles it.
CHARS_PER_TOKEN_CHECKED = 16
CUT_SLACK = 16  # a word cut at the prefix's end may take more tokens than the whole word


def tokens_in_prefix(model: Model, text: str) -> int:
    """At least how many tokens `text` holds, told from a prefix when the text is far longer than
    the context (else 0)."""
    cut = model.n_ctx * CHARS_PER_TOKEN_CHECKED
    if len(text) <= cut:
        return 0
    return len(model.tokenize(text[:cut], add_special=False, parse_special=True)) - CUT_SLACK


def tokenize_rendered(model: Model, text: str) -> list[int]:
    bos, _, _ = model.bos_eos_text()
    # Templates often write the BOS text themselves; the tokenizer must not add a second one.
    return model.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)


def prompt_tokens(model: Model, text: str, raw: bool, system: str | None = None) -> list[int]:
    if raw:
        return model.tokenize(text, add_special=True, parse_special=True)
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": text}
    ]
    return tokenize_rendered(model, render_chat(model, messages))
