"""Turn user text into prompt tokens, through the model's own chat template when it has one."""

from __future__ import annotations

from collections.abc import Sequence

from localspec.backend.model import Model
from localspec.errors import LocalspecError

Message = dict[str, str]


def render_chat(model: Model, messages: Sequence[Message]) -> str | None:
    """The conversation rendered by the GGUF's chat template, or None when the model has none."""
    template = model.chat_template()
    if template is None:
        return None
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    bos, eos, _ = model.bos_eos_text()
    try:
        return Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)(messages=list(messages)).prompt
    except Exception as e:  # jinja2 raises template and runtime errors of many types
        raise LocalspecError(f"the model's chat template failed ({e}); use --raw to send the prompt as is") from None


def tokenize_rendered(model: Model, text: str) -> list[int]:
    bos, _, _ = model.bos_eos_text()
    # Templates often write the BOS text themselves; the tokenizer must not add a second one.
    return model.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)


def prompt_tokens(model: Model, text: str, raw: bool, system: str | None = None) -> list[int]:
    if not raw:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        rendered = render_chat(model, messages)
        if rendered is not None:
            return tokenize_rendered(model, rendered)
    return model.tokenize(text, add_special=True, parse_special=True)
