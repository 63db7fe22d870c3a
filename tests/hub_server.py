"""A local stand-in for the Hugging Face Hub's plain-HTTP file API, so that the real huggingface_hub
code runs in tests: tree listing, resolve URLs with commit/ETag/LFS size and sha256 headers, Range."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

TREE_RE = re.compile(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$")
RESOLVE_RE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


@dataclass
class FakeHub:
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    # Served bytes differ from the advertised sha256
    corrupt: set[tuple[str, str]] = field(default_factory=set)
    cuts: dict[tuple[str, str], int] = field(default_factory=dict)  # GETs that drop the connection midway
    slow: dict[tuple[str, str], float] = field(default_factory=dict)  # seconds per MiB served
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range)

    def commit(self, repo: str) -> str:
        return hashlib.sha1(repo.encode()).hexdigest()

    def start(self) -> str:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                hub._handle(self, head=False)

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlparse(h.path)
        path = unquote(url.path)
        self.requests.append((h.command, path, h.headers.get("Range")))
        m = TREE_RE.match(path) or RESOLVE_RE.match(path)
        if not m:
            return self._error(h, 404, "RepoNotFound")
        repo = m.group(1)
        if repo not in self.repos:
            return self._error(h, 401, "RepoNotFound")
        if repo in self.gated:
            return self._error(h, 401, "GatedRepo")
        if m.re is TREE_RE:
            return self._tree(h, repo, m.group(3) or "")
        return self._file(h, repo, m.group(3), head)

    def _tree(self, h: BaseHTTPRequestHandler, repo: str, prefix: str) -> None:
        entries = []
        for name, data in sorted(self.repos[repo].items()):
            if prefix and not name.startswith(prefix + "/"):
                continue
            sha = hashlib.sha256(data).hexdigest()
            entries.append(
                {
                    "type": "file",
                    "path": name,
                    "size": len(data),
                    "oid": hashlib.sha1(data).hexdigest(),
                    "lfs": {"oid": sha, "size": len(data), "pointerSize": 134},
                }
            )
        body = json.dumps(entries).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _file(self, h: BaseHTTPRequestHandler, repo: str, name: str, head: bool) -> None:
        files = self.repos[repo]
        if name not in files:
            return self._error(h, 404, "EntryNotFound")
        data = files[name]
        sha = hashlib.sha256(data).hexdigest()
        if (repo, name) in self.corrupt:
            data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
        start = 0
        rng = h.headers.get("Range")
        if rng and not head:
            start = int(re.match(r"bytes=(\d+)-", rng).group(1))  # type: ignore[union-attr]
        body = data[start:]
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", self.commit(repo))
        h.send_header("ETag", f'"{sha}"')
        h.send_header("X-Linked-Etag", f'"{sha}"')
        h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(body)))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        if self.cuts.get((repo, name), 0) > 0:
            self.cuts[(repo, name)] -= 1
            h.wfile.write(body[: len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        pause = self.slow.get((repo, name), 0.0) / 16
        step = 1 << 16 if pause else len(body) or 1
        for i in range(0, len(body), step):
            h.wfile.write(body[i : i + step])
            h.wfile.flush()
            time.sleep(pause)
