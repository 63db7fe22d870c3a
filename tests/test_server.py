"""`localspec serve` as clients meet it: a real server process on a loopback port, the real `openai`
client and raw HTTP."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import openai
import pytest
from cli_helpers import assert_one_line_error, localspec
from server_helpers import Served, call, start
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from localspec.server.internal_error import InternalErrors

PROMPT = "Write a short poem about the sea."


def chat_body(content: str = PROMPT, **extra: object) -> dict:
    return {
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 40,
        "speculative.mode": "fixed",
        **extra,
    }


@pytest.fixture(scope="module")
def served(smollm2_f16: Path, smollm2_q4: Path) -> Iterator[Served]:
    s = start(
        "-m", str(smollm2_f16), "-d", str(smollm2_q4), "--ctx", "1024", "--max-queue", "16", "--slots", "3"
    )
    yield s
    assert s.stop() == 0, "".join(s.log)


COUNTING = "".join(f"{i}\n" for i in range(1, 41))


def endless(**extra: object) -> dict:
    """A text completion that goes on counting until the context is full (many seconds), unless
    it is stopped."""
    return {"prompt": COUNTING, "max_tokens": 3000, "temperature": 0, "speculative.mode": "off", **extra}


def send_raw(served: Served, body: dict) -> socket.socket:
    """A request on a socket of the test's own, to close under the server."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", served.port))
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
        f"{len(payload)}\r\n\r\n"
    )
    sock.sendall(head.encode() + payload)
    return sock


def stream_text(chunks) -> tuple[str, list]:
    chunks = list(chunks)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks


def test_openai_client_gives_the_text_of_run_streamed_and_not(
    served: Served, smollm2_f16: Path, smollm2_q4: Path
):
    run = localspec(
        "run",
        "-m",
        str(smollm2_f16),
        "-d",
        str(smollm2_q4),
        "--ctx",
        "1024",
        "-p",
        PROMPT,
        "-n",
        "40",
        "--temp",
        "0",
        "--draft-mode",
        "fixed",
        "--json",
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    expected = json.loads(run.stdout)["text"]
    client = served.client()
    extra = {"speculative.mode": "fixed"}
    whole = client.chat.completions.create(
        model="smollm2-f16",
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=40,
        extra_body=extra,
    )
    assert whole.choices[0].message.content == expected
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens == json.loads(run.stdout)["stats"]["n_generated"]
    timings = whole.model_extra["timings"]
    assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    assert timings["predicted_n"] == whole.usage.completion_tokens and timings["predicted_per_second"] > 0
    assert timings["prompt_ms"] <= timings["first_token_ms"]
    # Estimates against the target alone need its one-token passes timed: auto's first steps time them.
    auto = client.chat.completions.create(
        model="smollm2-f16", messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=40
    )
    assert auto.choices[0].message.content == expected
    assert (
        auto.model_extra["timings"]["speedup_estimate"] > 0
        and auto.model_extra["timings"]["end_to_end_estimate"] > 0
    )
    text, chunks = stream_text(
        client.chat.completions.create(
            model="smollm2-f16",
            messages=[{"role": "user", "content": PROMPT}],
            temperature=0,
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=extra,
        )
    )
    assert text == expected
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].model_extra["timings"]["draft_n"] > 0  # the last chunk carries the timings
    # Text completions: the prompt as is.
    completion = client.completions.create(
        model="smollm2-f16", prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert completion.choices[0].text and completion.usage.prompt_tokens > 0
    assert [m.id for m in client.models.list()] == ["smollm2-f16.gguf"]


def test_raw_sse_ends_with_done(served: Served):
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=120)
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(chat_body(stream=True, max_tokens=8)),
        headers={"Content-Type": "application/json"},
    )
    res = conn.getresponse()
    assert res.status == 200 and res.getheader("Content-Type").startswith("text/event-stream")
    events = [line for line in res.read().decode().split("\n\n") if line]
    conn.close()
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    assert "timings" in json.loads(events[-2][6:])


@pytest.mark.parametrize(
    "body,status,param,fragment",
    [
        ({"messages": [{"role": "user", "content": "hi"}], "n": 17}, 400, "n", "[1, 16]"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 21},
            400,
            "top_logprobs",
            "[0, 20]",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2},
            400,
            "top_logprobs",
            "needs logprobs: true",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "logprobs": 3}, 400, "logprobs", "true or false"),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "no spaces"}}],
            },
            400,
            "tools[0].function.name",
            "letters, digits",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "bogus"}}}],
            },
            400,
            "tools[0].function.parameters",
            "cannot be turned into a grammar",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "tools": [{"function": {"name": "f"}}]},
            400,
            "tools[0]",
            '"type": "function"',
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"},
            400,
            "tool_choice",
            "offers no tools",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            400,
            "tool_choice.function.name",
            "names no tool",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "response_format": {"type": "json_object"},
            },
            400,
            "tools",
            "cannot constrain it too",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": {}}}],
                    },
                ]
            },
            400,
            "messages[1].tool_calls[0]",
            "arguments",
        ),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            400,
            "messages[0].tool_call_id",
            "the id of the call",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "presence_penalty": 2.5},
            400,
            "presence_penalty",
            "presence_penalty must be in [-2, 2]",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "repeat_penalty": 0},
            400,
            "repeat_penalty",
            "must be > 0",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "temperature": -1},
            400,
            "temperature",
            "temperature must be >= 0",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"},
            400,
            "max_tokens",
            "an integer",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0},
            400,
            "max_tokens",
            ">= 1",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "stop": [""]}, 400, "stop", "non-empty"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "speculative.n_max": 0},
            400,
            "speculative.n_max",
            "speculative.n_max must be in [1, 256]",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "speculative.n_min": 20,
                "speculative.n_max": 4,
            },
            400,
            "speculative.n_min",
            "speculative.n_max",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "speculative.mode": "sometimes"},
            400,
            "speculative.mode",
            "auto, fixed, off",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "speculative.bogus": 1},
            400,
            "speculative.bogus",
            "unknown setting",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"}},
            400,
            "response_format.type",
            "json_schema",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "x"}},
            },
            400,
            "response_format.json_schema.schema",
            "missing",
        ),
        (
            {
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "bogus"}}},
            },
            400,
            "response_format.json_schema.schema",
            "cannot be turned into a grammar",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "json_schema": {"type": "bogus"}},
            400,
            "json_schema",
            "cannot be turned into a grammar",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= ("}, 400, "grammar", "GBNF"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "grammar": 'root ::= "a"', "json_schema": {}},
            400,
            "json_schema",
            "cannot be given with grammar",
        ),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role", "must be one of"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            400,
            "messages[0].content[0]",
            "text parts",
        ),
        ({"messages": []}, 400, "messages", "non-empty"),
        (
            {"messages": [{"role": "user", "content": "word " * 1500}]},
            400,
            "messages",
            "the context holds 1024",
        ),
    ],
)
def test_bad_requests_name_the_field(served: Served, body, status, param, fragment):
    code, out, _ = call(served, "POST", "/v1/chat/completions", body)
    assert code == status, out
    assert out["error"]["param"] == param and fragment in out["error"]["message"], out
    assert "Traceback" not in json.dumps(out)


def test_neutral_values_real_clients_send_are_accepted(served: Served):
    body = chat_body(
        max_tokens=4,
        n=1,
        presence_penalty=0,
        frequency_penalty=0.0,
        logprobs=False,
        user="me",
        tools=[],
        response_format={"type": "text"},
        metadata={"a": "b"},
    )
    code, out, _ = call(served, "POST", "/v1/chat/completions", body)
    assert code == 200, out


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 24},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
EXTRACT = "Give the person as JSON: Maria Lopez, 34, lives in Madrid."


def test_a_json_schema_holds_for_every_seed_and_greedy_output_is_the_constrained_targets_penalties_too(
    served: Served,
):
    client = served.client()
    shape = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for seed in range(20):
        out = client.chat.completions.create(
            model="any",
            messages=[{"role": "user", "content": EXTRACT}],
            temperature=0.8,
            seed=seed,
            max_tokens=80,
            response_format=shape,
            extra_body={"speculative.mode": "fixed"},
        )
        assert out.choices[0].finish_reason == "stop", out.choices[0].message.content
        jsonschema.validate(json.loads(out.choices[0].message.content), PERSON)
    kw = dict(
        model="any",
        messages=[{"role": "user", "content": EXTRACT}],
        temperature=0,
        max_tokens=80,
        response_format=shape,
    )
    drafted = client.chat.completions.create(**kw, extra_body={"speculative.mode": "fixed"})
    alone = client.chat.completions.create(**kw, extra_body={"speculative.mode": "off"})
    assert drafted.model_extra["timings"]["draft_n_accepted"] > 0
    assert drafted.choices[0].message.content == alone.choices[0].message.content
    assert json.loads(drafted.choices[0].message.content)["age"] == 34
    # JSON mode and a GBNF grammar, streamed.
    text, _ = stream_text(
        client.chat.completions.create(
            model="any",
            messages=[{"role": "user", "content": EXTRACT}],
            temperature=0.7,
            seed=1,
            max_tokens=60,
            response_format={"type": "json_object"},
            stream=True,
        )
    )
    assert isinstance(json.loads(text), dict)
    # Penalties, as llm -o frequency_penalty sends them: drafted or not, the same text.
    kw = dict(
        model="any",
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=48,
        frequency_penalty=0.8,
        presence_penalty=0.4,
    )
    penalised = client.chat.completions.create(
        **kw, extra_body={"speculative.mode": "fixed", "repeat_penalty": 1.1}
    )
    assert (
        penalised.choices[0].message.content
        == client.chat.completions.create(**kw, extra_body={"speculative.mode": "off", "repeat_penalty": 1.1})
        .choices[0]
        .message.content
    )
    yes_no = client.completions.create(
        model="any",
        prompt="Is Madrid in Spain? Answer:",
        max_tokens=4,
        temperature=0,
        extra_body={"grammar": 'root ::= " yes" | " no"'},
    )
    assert yes_no.choices[0].text in (" yes", " no")


def tool(name: str, description: str, **properties: str) -> dict:
    schema = {
        "type": "object",
        "properties": {k: {"type": v} for k, v in properties.items()},
        "required": list(properties),
    }
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOLS = [
    tool("get_weather", "The weather in a city now", city="string"),
    tool("add", "The sum of two numbers", a="number", b="number"),
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def run_tool(name: str, args: dict) -> str:
    return f"{args['city']}: sunny, 12 C" if name == "get_weather" else str(args["a"] + args["b"])


def assembled(chunks) -> tuple[str, list[tuple[str, str]], str | None]:
    """A stream's content, its tool calls put together from their deltas, and its finish reason."""
    content, calls, finish = "", {}, None
    for c in chunks:
        if not c.choices:
            continue
        delta = c.choices[0].delta
        content += delta.content or ""
        for d in delta.tool_calls or []:
            name, args = calls.get(d.index, ("", ""))
            calls[d.index] = (name + (d.function.name or ""), args + (d.function.arguments or ""))
        finish = c.choices[0].finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


def test_an_agent_loop_of_five_tool_rounds_every_call_parsed(served: Served):
    """As an agent runs it: the openai client, two tools, five rounds of calls and their results
    (required, a named function, streamed), then a free reply; drafting on throughout."""
    client = served.client()
    messages = [{"role": "user", "content": "Check the weather in Oslo, then in Rome, and add 12 and 30."}]
    choices = [
        "required",
        {"type": "function", "function": {"name": "add"}},
        "required",
        {"type": "function", "function": {"name": "get_weather"}},
        "required",
    ]
    drafted = 0
    for i, choice in enumerate(choices):
        kw = dict(
            model="agent",
            messages=messages,
            tools=TOOLS,
            tool_choice=choice,
            temperature=0.7,
            seed=i,
            max_tokens=96,
            extra_body={"speculative.mode": "fixed"},
        )
        if i == 2:
            content, calls, finish = assembled(client.chat.completions.create(**kw, stream=True))
            ids = [f"call_{i}_{j}" for j in range(len(calls))]
        else:
            out = client.chat.completions.create(**kw)
            message, finish = out.choices[0].message, out.choices[0].finish_reason
            calls, ids = (
                [(c.function.name, c.function.arguments) for c in message.tool_calls or []],
                [c.id for c in message.tool_calls or []],
            )
            assert message.content is None
            drafted += out.model_extra["timings"]["draft_n"]
        assert finish == "tool_calls" and len(calls) == 1, (finish, calls)
        if isinstance(choice, dict):
            assert calls[0][0] == choice["function"]["name"]
        for (name, args), _call_id in zip(calls, ids, strict=False):
            jsonschema.validate(json.loads(args), SCHEMAS[name])
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": k, "type": "function", "function": {"name": n, "arguments": a}}
                    for (n, a), k in zip(calls, ids, strict=False)
                ],
            }
        )
        messages += [
            {"role": "tool", "tool_call_id": k, "content": run_tool(n, json.loads(a))}
            for (n, a), k in zip(calls, ids, strict=False)
        ]
    assert drafted > 0
    out = client.chat.completions.create(
        model="agent", messages=messages, tools=TOOLS, temperature=0, max_tokens=64
    )
    message = out.choices[0].message
    assert (out.choices[0].finish_reason, message.content is None) in (
        ("tool_calls", True),
        ("stop", False),
    ), out
    assert "tool_response" not in (message.content or "") and "{" not in (message.content or "")[:1]


def test_a_streamed_tool_call_is_the_whole_replys_and_tool_choice_none_answers_in_text(served: Served):
    client = served.client()
    kw = dict(
        model="any",
        messages=[{"role": "user", "content": "What is 2 plus 3?"}],
        tools=TOOLS,
        tool_choice="required",
        temperature=0,
        max_tokens=64,
    )
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls
    content, calls, finish = assembled(client.chat.completions.create(**kw, stream=True))
    assert (
        content == ""
        and finish == "tool_calls"
        and calls == [(c.function.name, c.function.arguments) for c in whole]
    )
    free = client.chat.completions.create(**{**kw, "tool_choice": "none"})
    assert (
        free.choices[0].finish_reason in ("stop", "length")
        and free.choices[0].message.content
        and not free.choices[0].message.tool_calls
    )


def test_a_template_with_hermes_tool_calls_from_chat_template(smollm2_q4: Path):
    """--chat-template gives SmolLM2 a Qwen-style template: tools rendered by it, calls written in
    <tool_call> tags, read back, the result answered."""
    template = Path(__file__).parent / "templates" / "hermes.jinja"
    s = start("-m", str(smollm2_q4), "--ctx", "1024", "--chat-template", str(template))
    try:
        client = s.client()
        kw = dict(
            model="any",
            messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
            tools=TOOLS,
            temperature=0,
            max_tokens=64,
        )
        out = client.chat.completions.create(
            **kw, tool_choice={"type": "function", "function": {"name": "get_weather"}}
        )
        calls = out.choices[0].message.tool_calls
        assert out.choices[0].finish_reason == "tool_calls" and [c.function.name for c in calls] == [
            "get_weather"
        ]
        jsonschema.validate(json.loads(calls[0].function.arguments), SCHEMAS["get_weather"])
        content, streamed, _ = assembled(
            client.chat.completions.create(**kw, tool_choice="required", stream=True)
        )
        assert content == "" and len(streamed) == 1
        history = [
            *kw["messages"],
            out.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": calls[0].id, "content": "Oslo: sunny, 12 C"},
        ]
        reply = client.chat.completions.create(**{**kw, "messages": history})
        assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
        assert "<tool_call>" not in (reply.choices[0].message.content or "")
    finally:
        assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def served_alone(smollm2_f16: Path, smollm2_q4: Path) -> Iterator[Served]:
    """One request at a time: a seeded sampled reply repeats exactly. With several at once it does
    up to floating-point ties (where its cells lie and what runs beside it move its logits by
    ~1e-2: docs/serve.md), which a sampled near-tie can turn."""
    s = start("-m", str(smollm2_f16), "-d", str(smollm2_q4), "--ctx", "1024", "--parallel", "1")
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_n_choices_one_after_the_other_each_seeded_streamed_and_not(served_alone: Served):
    served = served_alone
    client = served.client()
    kw = dict(
        model="any",
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0.9,
        seed=5,
        max_tokens=24,
        n=3,
        extra_body={"speculative.mode": "fixed"},
    )
    out = client.chat.completions.create(**kw)
    texts = [c.message.content for c in out.choices]
    assert [c.index for c in out.choices] == [0, 1, 2] and len(set(texts)) > 1  # each choice drawn on its own
    assert out.usage.completion_tokens == out.model_extra["timings"]["predicted_n"] >= 3
    assert [
        c.message.content for c in client.chat.completions.create(**kw).choices
    ] == texts  # the seed repeats them all
    chunks = list(
        client.chat.completions.create(**{**kw, "n": 2}, stream=True, stream_options={"include_usage": True})
    )
    by_index = [
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        for i in (0, 1)
    ]
    assert by_index == texts[:2]
    assert (
        chunks[-1].usage.completion_tokens
        == client.chat.completions.create(**{**kw, "n": 2}).usage.completion_tokens
    )
    greedy = client.completions.create(model="any", prompt="The sea is", max_tokens=8, temperature=0, n=2)
    assert greedy.choices[0].text == greedy.choices[1].text and [c.index for c in greedy.choices] == [0, 1]
    code, body, _ = call(served, "POST", "/v1/completions", {"prompt": "x", "tools": TOOLS})
    assert (
        code == 400 and body["error"]["param"] == "tools" and "chat completions" in body["error"]["message"]
    )


def test_logprobs_are_the_targets_whether_or_not_drafts_were_accepted(served: Served):
    client = served.client()
    kw = dict(
        model="any",
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=24,
        logprobs=True,
        top_logprobs=3,
    )
    drafted = client.chat.completions.create(**kw, extra_body={"speculative.mode": "fixed"})
    alone = client.chat.completions.create(**kw, extra_body={"speculative.mode": "off"})
    assert (drafted.model_extra or {})["timings"]["draft_n_accepted"] > 0
    got, ref = drafted.choices[0].logprobs.content, alone.choices[0].logprobs.content
    assert (
        drafted.choices[0].message.content
        == alone.choices[0].message.content
        == "".join(e.token for e in got)
    )
    assert len(got) == drafted.usage.completion_tokens == 24
    for e, r in zip(got, ref, strict=True):
        assert e.token == r.token and e.bytes == list(e.token.encode()) and e.logprob <= 0
        # A verification pass is batched, the target alone's are not: llama.cpp rounds them apart by ~1e-2.
        assert e.logprob == pytest.approx(r.logprob, abs=2e-2)
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token  # greedy: the likeliest
        assert (
            e.top_logprobs[0].logprob == e.logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
        )
    streamed = [
        c
        for c in client.chat.completions.create(**kw, stream=True, extra_body={"speculative.mode": "fixed"})
        if c.choices
    ]
    pieces = [e for c in streamed if c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in pieces] == [e.token for e in got]
    assert [e.logprob for e in pieces] == pytest.approx([e.logprob for e in got], abs=1e-6)
    text = client.completions.create(
        model="any",
        prompt="The sea is",
        temperature=0,
        max_tokens=12,
        logprobs=2,
        extra_body={"speculative.mode": "fixed"},
    )
    lp = text.choices[0].logprobs
    assert (
        "".join(lp.tokens) == text.choices[0].text
        and len(lp.token_logprobs) == 12
        and all(len(t) == 2 for t in lp.top_logprobs)
    )
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(12)]


def test_malformed_input_and_unknown_routes_answer_json_and_the_server_goes_on(served: Served):
    code, out, _ = call(served, "POST", "/v1/chat/completions", raw=b"{not json")
    assert code == 400 and "not valid JSON" in out["error"]["message"]
    code, out, _ = call(served, "POST", "/v1/chat/completions", raw=b"[1, 2]")
    assert code == 400 and "JSON object" in out["error"]["message"]
    code, out, _ = call(served, "POST", "/v1/completions", {"prompt": [10**9]})
    assert code == 400 and out["error"]["param"] == "prompt"
    code, out, _ = call(served, "GET", "/v1/nothing")
    assert code == 404 and out["error"]["type"] == "not_found_error"
    code, out, _ = call(served, "GET", "/v1/chat/completions")
    assert code == 405 and "error" in out
    assert call(served, "GET", "/health")[:2] == (200, {"status": "ok"})
    assert call(served, "POST", "/v1/chat/completions", chat_body(max_tokens=4))[0] == 200


def test_a_conversation_resent_evaluates_only_its_new_suffix_across_interleaved_requests(served: Served):
    first = [{"role": "user", "content": "Tell me about lighthouses."}]
    code, a, _ = call(
        served, "POST", "/v1/chat/completions", {"messages": first, "temperature": 0, "max_tokens": 30}
    )
    assert code == 200
    # An interleaved request (a chat UI's title request) shares nothing but the template's start.
    assert (
        call(
            served,
            "POST",
            "/v1/chat/completions",
            chat_body("Give this chat a title: lighthouses", max_tokens=6),
        )[0]
        == 200
    )
    second = [
        *first,
        {"role": "assistant", "content": a["choices"][0]["message"]["content"]},
        {"role": "user", "content": "And their keepers?"},
    ]
    code, b, _ = call(
        served, "POST", "/v1/chat/completions", {"messages": second, "temperature": 0, "max_tokens": 8}
    )
    assert code == 200
    t = b["timings"]
    assert t["cache_n"] >= a["usage"]["prompt_tokens"] and t["prompt_n"] < 20, t
    assert t["cache_n"] + t["prompt_n"] == b["usage"]["prompt_tokens"]


def test_metrics_count_drafts_tokens_and_requests(served: Served):
    assert call(served, "POST", "/v1/chat/completions", chat_body(max_tokens=16))[0] == 200
    code, text, headers = call(served, "GET", "/metrics")
    assert code == 200 and headers["content-type"].startswith("text/plain")
    values = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert values["localspec:spec_decode_num_drafts_total"] > 0
    assert (
        0
        < values["localspec:spec_decode_num_accepted_tokens_total"]
        <= values["localspec:spec_decode_num_draft_tokens_total"]
    )
    assert values["localspec:generation_tokens_total"] >= 16 and values["localspec:prompt_tokens_total"] > 0
    assert (
        values['localspec:requests_total{outcome="ok"}'] >= 1
        and values['localspec:requests_total{outcome="bad_request"}'] >= 0
    )
    assert (
        values["localspec:time_to_first_token_seconds_count"] >= 1
        and values["localspec:e2e_request_latency_seconds_count"] >= 1
    )


def test_streaming_sends_the_first_chunk_early_and_a_disconnect_cancels(served: Served):
    body = chat_body("Count from 1 to 500, one number per line.", max_tokens=128, stream=True)
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=120)
    t0 = time.perf_counter()
    conn.request(
        "POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    res = conn.getresponse()
    stamps = []
    for line in res:
        if line.startswith(b"data: {") and (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {}).get(
            "content"
        ):
            stamps.append(time.perf_counter() - t0)
        if line.startswith(b"data: [DONE]"):
            break
    conn.close()
    # Chunks go out as tokens come (benchmarks/RESULTS.md measures the first at under a quarter of
    # a 128-token reply's time); a response buffered to the end would put it at the end.
    assert len(stamps) > 20 and stamps[0] <= 0.5 * stamps[-1], (stamps[0], stamps[-1])
    # A client that leaves mid-stream: its generation stops, and the next request is served at once.
    before = metric(served, 'localspec:requests_total{outcome="cancelled"}')
    sock = send_raw(served, endless(stream=True))
    received = b""
    while b"data: " not in received:  # streaming has begun
        received += sock.recv(4096)
    sock.close()
    t0 = time.perf_counter()
    assert call(served, "POST", "/v1/chat/completions", chat_body(max_tokens=4))[0] == 200
    # Not after the ~1000 tokens (seconds) the one that left would fill its context with
    assert time.perf_counter() - t0 < 5
    assert metric(served, 'localspec:requests_total{outcome="cancelled"}') == before + 1


def test_a_client_that_leaves_a_plain_request_cancels_it(served: Served):
    before = metric(served, 'localspec:requests_total{outcome="cancelled"}')
    sock = send_raw(served, endless())
    time.sleep(1.0)  # generating
    sock.close()
    t0 = time.perf_counter()
    assert call(served, "POST", "/v1/chat/completions", chat_body(max_tokens=4))[0] == 200
    assert time.perf_counter() - t0 < 5
    assert metric(served, 'localspec:requests_total{outcome="cancelled"}') == before + 1


def test_a_queued_request_whose_client_left_is_dropped(served: Served):
    ok, generated = (
        metric(served, 'localspec:requests_total{outcome="ok"}'),
        metric(served, "localspec:generation_tokens_total"),
    )
    cancelled = metric(served, 'localspec:requests_total{outcome="cancelled"}')
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(call, served, "POST", "/v1/completions", endless(max_tokens=300))
        time.sleep(0.5)  # generating
        # Queued behind it...
        sock = send_raw(served, {"prompt": "Once upon a time", "max_tokens": 50, "temperature": 0})
        time.sleep(0.5)
        sock.close()  # ...and given up on
        code, out, _ = running.result(timeout=120)
    assert code == 200
    assert metric(served, 'localspec:requests_total{outcome="cancelled"}') == cancelled + 1
    assert metric(served, 'localspec:requests_total{outcome="ok"}') == ok + 1  # the dropped one never ran
    assert (
        metric(served, "localspec:generation_tokens_total") == generated + out["usage"]["completion_tokens"]
    )


def metric(served: Served, name: str) -> float:
    text = call(served, "GET", "/metrics")[1]
    return next(float(line.split(" ")[1]) for line in text.splitlines() if line.startswith(name + " "))


def logged(served: Served, fragment: str, timeout: float = 10, since: int = 0) -> list[str]:
    """The server's stderr lines from line `since` on that hold `fragment` (waiting a moment: a
    request's line follows its response)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in served.log[since:] if fragment in line]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_any_model_name_is_served_and_every_request_is_logged_once(served: Served, smollm2_f16: Path):
    since = len(served.log)
    code, out, _ = call(served, "POST", "/v1/chat/completions", chat_body(max_tokens=6, model="gpt-4o"))
    # Clients send whatever name they were set up with
    assert code == 200 and out["model"] == smollm2_f16.name
    line = logged(served, "POST /v1/chat/completions 200", since=since)[-1]
    assert re.search(
        r"200 \d+\.\d\d s · \d+ prompt \+ 6 tokens, [\d.]+ tok/s · drafted \d+, accepted \d+ · queued \d+ "
        r"ms$",
        line.strip(),
    ), line
    since = len(served.log)
    call(served, "GET", "/v1/nothing")
    call(served, "POST", "/v1/chat/completions", {"messages": []})
    assert len(logged(served, "POST /v1/chat/completions 400", since=since)) == 1
    assert len(logged(served, "GET /v1/nothing 404", since=since)) == 1


def test_an_alias_json_log_lines_and_the_wait_behind_another_request(smollm2_q4: Path):
    # One generation at a time: the second request waits behind the first.
    s = start("-m", str(smollm2_q4), "--alias", "house-model", "--log-format", "json", "--parallel", "1")
    try:
        assert [m.id for m in s.client().models.list().data] == ["house-model"]
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(call, s, "POST", "/v1/completions", endless(max_tokens=300))
            time.sleep(1.0)  # generating now
            code, out, headers = call(
                s, "POST", "/v1/chat/completions", chat_body(max_tokens=4, model="anything")
            )
            assert running.result(timeout=120)[0] == 200
        assert code == 200 and out["model"] == "house-model"
        waited = out["timings"]["queue_ms"]
        assert waited > 100 and abs(int(headers["x-queue-ms"]) - waited) < 2, (waited, headers)
        logged(s, '"path": "/v1/chat/completions"')  # a request's line follows its response
        records = [json.loads(line) for line in s.log if line.startswith("{")]
        chat = next(r for r in records if r["path"] == "/v1/chat/completions")
        assert chat["status"] == 200 and chat["completion_tokens"] == 4 and chat["queue_ms"] == round(waited)
        assert {
            "method",
            "seconds",
            "tokens_per_second",
            "drafted",
            "accepted",
            "prompt_tokens",
        } <= chat.keys()
    finally:
        assert s.stop() == 0


def test_api_key_queue_overflow_and_a_clean_stop(smollm2_q4: Path):
    queue = ("--max-queue", "1", "--parallel", "1")  # one generating, one waiting, then 503
    s = start("-m", str(smollm2_q4), "--api-key", "sesame", *queue, "--shutdown-timeout", "30")
    try:
        assert call(s, "GET", "/health")[0] == 200  # probes need no key
        code, out, _ = call(s, "GET", "/v1/models")
        assert code == 401 and out["error"]["type"] == "authentication_error"
        assert call(s, "GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert call(s, "GET", "/v1/models", headers={"Authorization": "Bearer sesame"})[0] == 200
        with pytest.raises(openai.AuthenticationError):
            s.client("wrong").models.list()
        auth = {"Authorization": "Bearer sesame"}
        long = endless(max_tokens=800)
        with ThreadPoolExecutor(4) as pool:
            running = pool.submit(call, s, "POST", "/v1/completions", long, auth)
            time.sleep(1.0)  # generating now
            queued = pool.submit(call, s, "POST", "/v1/chat/completions", chat_body(max_tokens=4), auth)
            time.sleep(0.5)
            code, out, headers = call(s, "POST", "/v1/chat/completions", chat_body(max_tokens=4), auth)
            assert code == 503 and headers.get("retry-after") and "busy" in out["error"]["message"]
            # SIGTERM: the running request finishes, the queued one is answered 503, exit code 0.
            s.proc.send_signal(signal.SIGTERM)
            assert running.result(timeout=120)[0] == 200
            assert queued.result(timeout=120)[0] == 503
        assert s.proc.wait(60) == 0
        assert "Traceback" not in "".join(s.log)
    finally:
        s.stop(signal.SIGKILL)


def test_a_stop_signal_cancels_what_outlives_the_grace_period(smollm2_q4: Path):
    s = start("-m", str(smollm2_q4), "--shutdown-timeout", "1")
    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(call, s, "POST", "/v1/completions", endless())
        time.sleep(1.0)
        t0 = time.perf_counter()
        s.proc.send_signal(signal.SIGINT)
        code, out, _ = long.result(timeout=30)
        assert code == 503 and "shutting down" in out["error"]["message"]
        assert s.proc.wait(30) == 0 and time.perf_counter() - t0 < 15
    assert "Traceback" not in "".join(s.log)


def test_a_second_ctrl_c_mid_stream_ends_the_stream_cleanly_at_once(smollm2_q4: Path):
    s = start("-m", str(smollm2_q4), "--shutdown-timeout", "60")
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps(endless(stream=True)),
        headers={"Content-Type": "application/json"},
    )
    res = conn.getresponse()
    events = [next(line for line in res if line.startswith(b"data: "))]
    s.proc.send_signal(signal.SIGINT)
    assert logged(s, "Ctrl-C again to cancel it now")  # one Ctrl-C says what it waits for
    for line in res:  # and the stream goes on
        if line.startswith(b"data: "):
            events.append(line)
        if len(events) > 20:
            break
    t0 = time.perf_counter()
    s.proc.send_signal(signal.SIGINT)
    events += [line for line in res if line.startswith(b"data: ")]
    conn.close()
    assert time.perf_counter() - t0 < 10 and s.proc.wait(30) == 0
    assert (
        events[-1] == b"data: [DONE]\n" and "shutting down" in json.loads(events[-2][6:])["error"]["message"]
    )
    assert "Traceback" not in "".join(s.log) and "CancelledError" not in "".join(s.log)


def test_exposed_without_a_key_warns_and_a_taken_port_is_one_line(smollm2_q4: Path):
    s = start("-m", str(smollm2_q4), "--host", "0.0.0.0")
    try:
        assert any("warning" in line and "--api-key" in line for line in s.log)
    finally:
        assert s.stop() == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        res = localspec("serve", "-m", str(smollm2_q4), "--port", str(taken.getsockname()[1]))
    assert (
        res.returncode == 1
        and res.stderr.strip().startswith("error: cannot listen on 127.0.0.1")
        and "in use" in res.stderr
    )
    assert_one_line_error(res, "in use")


def test_suffix_cache_is_kept_per_api_key_and_off_when_exposed(smollm2_q4: Path, tmp_path: Path):
    cache = tmp_path / "localspec" / "suffix"
    os.environ["XDG_CACHE_HOME"], before = str(tmp_path), os.environ["XDG_CACHE_HOME"]
    try:
        s = start(
            "-m", str(smollm2_q4), "--lookup-method", "suffix", "--draft-mode", "fixed", "--api-key", "k1"
        )
        try:
            client = s.client("k1")
            ask = lambda: client.chat.completions.create(
                model=smollm2_q4.name,
                messages=[{"role": "user", "content": PROMPT}],
                max_tokens=24,
                temperature=0,
            )  # noqa: E731
            first, again = ask(), ask()
            assert first.choices[0].message.content == again.choices[0].message.content
            timings = again.model_extra["timings"]  # type: ignore[index]
            # The regenerated reply comes from the kept one: nearly all of it accepted drafts.
            assert timings["draft_n_accepted"] >= 0.7 * again.usage.completion_tokens  # type: ignore[union-attr]
        finally:
            assert s.stop() == 0
        files = [p for p in cache.iterdir() if p.suffix == ".bin"]
        assert len(files) == 1 and "-" in files[0].name and "k1" not in files[0].name  # this key's own file
        s = start("-m", str(smollm2_q4), "--lookup-method", "suffix", "--host", "0.0.0.0", "--api-key", "k1")
        try:
            assert any("suffix cache is off" in line for line in s.log)
        finally:
            assert s.stop() == 0
    finally:
        os.environ["XDG_CACHE_HOME"] = before


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def test_hostile_bodies_get_a_4xx_each_the_log_one_line_and_the_server_goes_on(served: Served):
    since = len(served.log)
    deep = ('{"messages": ' + "[" * 5000 + "]" * 5000 + "}").encode()
    code, out, _ = call(served, "POST", "/v1/chat/completions", raw=deep)
    assert code == 400 and "nests deeper than 64" in out["error"]["message"]
    code, out, _ = call(
        served, "POST", "/v1/completions", raw=b'{"prompt": ' + b"[" * 100 + b"]" * 100 + b"}"
    )
    assert code == 400 and "nests deeper" in out["error"]["message"]
    # A lone surrogate is valid JSON (json.dumps writes it as an escape) but not Unicode.
    code, out, _ = call(
        served,
        "POST",
        "/v1/chat/completions",
        raw=json.dumps(chat_body("hi \ud800 there", max_tokens=4)).encode(),
    )
    assert code == 200 and out["choices"][0]["message"]["content"]
    assert logged(served, "1 text(s) of a request held lone surrogates", since=since)
    code, _, _ = call(
        served,
        "POST",
        "/v1/completions",
        raw=json.dumps({"prompt": "\udfff", "max_tokens": 2, "\ud801": 1}).encode(),
    )
    # A key too (unknown keys are ignored)
    assert code == 200 and logged(served, "2 text(s) of a request", since=since)
    # Over the context's 1024 tokens: refused from a prefix, never tokenized whole.
    for path, body in (
        ("/v1/completions", {"prompt": "the sea " * 200_000}),
        ("/v1/chat/completions", chat_body("the sea " * 200_000)),
    ):
        code, out, _ = call(served, "POST", path, body)
        assert code == 400 and "over 1024 tokens" in out["error"]["message"], out
    assert call(served, "POST", "/v1/chat/completions", chat_body(max_tokens=4))[0] == 200
    assert not [line for line in served.log[since:] if "Traceback" in line or "internal error" in line], (
        "".join(served.log[since:])
    )


def test_four_50_mb_bodies_at_once_get_413_and_the_server_grows_under_100_mb(served: Served):
    before, peak, done = rss_mb(served.proc.pid), [0.0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb(served.proc.pid))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    body = b'{"messages": [{"role": "user", "content": "' + b"x" * (50 * 2**20) + b'"}]}'
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(lambda _: call(served, "POST", "/v1/chat/completions", raw=body), range(4))
            )
    finally:
        done.set()
        watcher.join()
    assert [a[0] for a in answers] == [413] * 4 and "--max-body" in answers[0][1]["error"]["message"]
    assert peak[0] - before < 100, (before, peak[0])
    assert call(served, "POST", "/v1/chat/completions", chat_body(max_tokens=4))[0] == 200


def test_max_body_is_the_servers_own_limit(smollm2_q4: Path):
    s = start("-m", str(smollm2_q4), "--ctx", "512", "--max-body", "0.01")
    try:
        code, out, _ = call(s, "POST", "/v1/completions", {"prompt": "x" * 20_000, "max_tokens": 1})
        assert code == 413 and "10,485 bytes" in out["error"]["message"]
        assert call(s, "POST", "/v1/completions", {"prompt": "the sea " * 100, "max_tokens": 1})[0] == 200
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_an_error_no_handler_expected_is_a_500_and_one_log_line_a_stream_ends_where_it_was(capsys):
    """Starlette's last resort re-raises to uvicorn, which logs a 40-line traceback a request."""

    async def bug(request):
        raise RuntimeError("a bug")

    async def midway(request):
        async def parts():
            yield b"data: 1\n\n"
            raise RuntimeError("a bug mid-stream")

        return StreamingResponse(parts())

    counted: list[int] = []
    app = Starlette(
        routes=[Route("/bug", bug), Route("/midway", midway)],
        middleware=[Middleware(InternalErrors, on_error=lambda: counted.append(1))],
    )
    with TestClient(app) as client:
        r = client.get("/bug")
        assert r.status_code == 500 and r.json()["error"] == {
            "message": "internal error: RuntimeError",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        r = client.get("/midway")
        assert r.status_code == 200 and r.content == b"data: 1\n\n"
    err = capsys.readouterr().err
    assert (
        err.count("localspec serve: internal error: RuntimeError: a bug") == 2 and "Traceback" not in err
    ), err
    assert counted == [1, 1]
