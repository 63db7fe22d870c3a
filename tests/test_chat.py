"""`localspec chat` through a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pexpect
import pytest
from cli_helpers import CLI, in_terminal
from conftest import TinyModels

PROMPT = ">>> "
SUMMARY = re.compile(r"prompt (\d+) tokens(?:, (\d+) evaluated)?")


def spawn(*args: str, tmp: Path) -> pexpect.spawn:
    env = {
        "PATH": "/usr/bin:/bin",
        "TERM": "xterm-256color",
        "PYTHONUNBUFFERED": "1",
        "XDG_STATE_HOME": str(tmp / "state"),
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "HOME": str(tmp),
    }
    child = in_terminal("chat", *args, env=env)
    child.expect_exact(PROMPT)
    return child


def turn(child: pexpect.spawn, text: str) -> tuple[int, int]:
    """Send a message; return (prompt tokens, evaluated prompt tokens) from the summary."""
    child.sendline(text)
    child.expect(SUMMARY)
    total = int(child.match.group(1))
    evaluated = int(child.match.group(2) or total)
    child.expect_exact(PROMPT)
    return total, evaluated


def test_two_turns_stats_set_and_exit(tiny: TinyModels, tmp_path: Path):
    child = spawn("-m", str(tiny.target), "-d", str(tiny.close), "--temp", "0", "-n", "24", tmp=tmp_path)
    first_total, first_eval = turn(child, "the cat sat")
    assert first_eval == first_total
    second_total, second_eval = turn(child, "a dog ran")
    # The second turn re-renders the whole conversation; the caches already hold most of it.
    assert second_total > first_total
    assert second_eval < second_total - first_total + 30
    child.sendline("/stats")
    child.expect(r"2 replies, (\d+) tokens")
    child.expect_exact(PROMPT)
    child.sendline("/set draft-max 2")
    child.expect_exact("draft-max = 2")
    child.expect_exact(PROMPT)
    child.sendline("/set draft-max 0")
    child.expect_exact("draft-max must be in [1, 256]")
    child.expect_exact(PROMPT)
    turn(child, "moon")
    save = tmp_path / "conv.json"
    child.sendline(f"/save {save}")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect_exact("bye: 3 replies")  # a closing line: what the session did, and how to go on
    child.expect_exact("chat --resume")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    data = json.loads(save.read_text())
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"] * 3
    assert data["messages"][0]["content"] == "the cat sat"


def test_multiline_reset_load_and_ctrl_d(tiny: TinyModels, tmp_path: Path):
    saved = tmp_path / "in.json"
    saved.write_text(
        json.dumps(
            {
                "model": "x",
                "system": "be brief",
                "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
            }
        )
    )
    child = spawn("-m", str(tiny.target), "--temp", "0", "-n", "8", tmp=tmp_path)
    child.sendline(f"/load {saved}")
    child.expect_exact("loaded 2 messages")
    child.expect_exact(PROMPT)
    child.sendline('"""first line')
    child.sendline('second line"""')
    child.expect(SUMMARY)
    child.expect_exact(PROMPT)
    out = tmp_path / "out.json"
    child.sendline(f"/save {out}")
    child.expect_exact(PROMPT)
    data = json.loads(out.read_text())
    assert data["system"] == "be brief"
    assert data["messages"][2]["content"] == "first line\nsecond line"
    child.sendline("/reset")
    child.expect_exact("conversation cleared")
    child.expect_exact(PROMPT)
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_stops_a_reply_and_keeps_it(smollm2_q4: Path, tmp_path: Path):
    child = spawn("-m", str(smollm2_q4), "--temp", "0", "-n", "3000", "--ctx", "4096", tmp=tmp_path)
    child.sendline("Count from 1 to 1000, one number per line.")
    # Numbers are streaming (with the status line redrawn between them, cursor saved and restored).
    child.expect(re.compile(r"\d+(?:\x1b7.*?\x1b8)*\r\n(?:\x1b7.*?\x1b8)*\d+", re.S))
    child.sendintr()
    child.expect_exact("stop: interrupted")
    assert "^C" not in child.before  # the terminal's echo of Ctrl-C stays out of the reply
    child.expect_exact(PROMPT)
    out = tmp_path / "partial.json"
    child.sendline(f"/save {out}")
    child.expect_exact(PROMPT)
    reply = json.loads(out.read_text())["messages"][1]
    assert reply["role"] == "assistant" and reply["content"].strip()
    child.sendintr()  # Ctrl-C at an empty prompt leaves
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


@pytest.mark.parametrize("command", ["/frobnicate", "/set nope 1", "/load /does/not/exist.json"])
def test_bad_commands_do_not_end_the_chat(tiny: TinyModels, tmp_path: Path, command: str):
    child = spawn("-m", str(tiny.target), "--temp", "0", "-n", "4", tmp=tmp_path)
    child.sendline(command)
    child.expect(r"unknown|error")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_a_message_that_is_not_utf8_and_seed_minus_one_keep_the_session(tiny: TinyModels, tmp_path: Path):
    child = spawn("-m", str(tiny.target), "--temp", "0", "-n", "4", tmp=tmp_path)
    os.write(child.child_fd, b"the cat \xff\xfe sat\n")  # bytes no UTF-8 decoder accepts
    child.expect(SUMMARY)
    child.expect_exact(PROMPT)
    child.sendline("/set seed -1")
    child.expect_exact("seed = -1")
    child.expect_exact(PROMPT)
    turn(child, "a dog")
    out = tmp_path / "kept.json"
    child.sendline(f"/save {out}")
    child.expect_exact(PROMPT)
    messages = json.loads(out.read_text())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2
    assert messages[0]["content"] == "the cat \ufffd\ufffd sat"
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_resume_continues_the_last_conversation_even_after_a_crash(tiny: TinyModels, tmp_path: Path):
    child = spawn("-m", str(tiny.target), "--temp", "0", "-n", "6", tmp=tmp_path)
    turn(child, "the cat sat")
    child.sendline("a dog ran")
    child.expect(SUMMARY)
    child.kill(9)  # no clean exit: what was kept before the reply must do
    child.close()
    kept = tmp_path / "state" / "localspec" / "last_conversation.json"
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    child = spawn("-m", str(tiny.target), "--temp", "0", "-n", "6", "--resume", tmp=tmp_path)
    child.sendline("/stats")
    child.expect_exact(PROMPT)
    out = tmp_path / "resumed.json"
    child.sendline(f"/save {out}")
    child.expect_exact(PROMPT)
    messages = json.loads(out.read_text())["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"] == ["the cat sat", "a dog ran"]
    turn(child, "moon")
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_a_piped_chat_survives_bytes_that_are_not_utf8(tiny: TinyModels, tmp_path: Path):
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONUNBUFFERED": "1",
        "XDG_STATE_HOME": str(tmp_path),
        "HOME": str(tmp_path),
    }
    out = tmp_path / "piped.json"
    script = b"the cat \xff sat\na dog\n/help\n/save " + str(out).encode() + b"\n"
    res = subprocess.run(
        [*CLI, "chat", "-m", str(tiny.target), "--temp", "0", "-n", "4"],
        input=script,
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
    assert b"the message is not valid UTF-8" in res.stderr
    # Piped, chat's own lines are whole: nothing hard-wrapped at 80 columns.
    set_help = next(
        line for line in res.stdout.decode().splitlines() if line.strip().startswith("/set KEY VALUE")
    )
    assert len(set_help) > 80 and set_help.rstrip().endswith("lookup-max")
    assert [m["content"] for m in json.loads(out.read_text())["messages"] if m["role"] == "user"] == [
        "the cat \ufffd sat",
        "a dog",
    ]


def test_run_without_a_prompt_at_a_terminal_opens_a_chat(tiny: TinyModels, tmp_path: Path):
    env = {
        "PATH": "/usr/bin:/bin",
        "TERM": "xterm-256color",
        "PYTHONUNBUFFERED": "1",
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    child = in_terminal(
        "run", "-m", str(tiny.target), "-d", str(tiny.close), "-n", "8", "--temp", "0", env=env
    )
    child.expect_exact("chatting with tiny-1 (drafter: ")  # the file's own name (general.name), not its path
    turn(child, "the cat")  # run's options (-n, --temp) hold in the chat
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_set_shows_values_as_typed_and_refuses_what_is_fixed_for_the_session(
    tiny: TinyModels, tmp_path: Path
):
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONUNBUFFERED": "1",
        "XDG_STATE_HOME": str(tmp_path),
        "HOME": str(tmp_path),
    }
    script = b"/set\n/set ctx 100\n/set draft-mode fixed\n"
    res = subprocess.run(
        [*CLI, "chat", "-m", str(tiny.target), "--temp", "0", "-n", "4"],
        input=script,
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out, err = res.stdout.decode(), res.stderr.decode()
    assert (
        "draft-mode = auto" in out
        and "stop = none" in out
        and "'" not in out.split("draft-mode = ")[1].split("\n")[0]
    )
    assert "ctx is fixed for the session: start the chat with --ctx 100" in err
    assert "draft-mode = fixed" in out


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_hangup_or_sigterm_at_the_prompt_says_goodbye(tiny: TinyModels, tmp_path: Path, sig: int):
    child = spawn("-m", str(tiny.target), "--temp", "0", "-n", "4", tmp=tmp_path)
    child.kill(sig)
    child.expect_exact("bye: ")  # the goodbye, with the totals, as at Ctrl-D
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "Traceback" not in child.before
