"""A loopback TCP proxy, single-threaded (asyncio), that delays every forwarded chunk in each
direction by a fixed time (a network's latency) and can freeze: stop forwarding and reading while
keeping its sockets open, as a link that drops without a word looks to both ends.

In a test: `proxy = Proxy(("127.0.0.1", port), delay_s); proxy.start()` then `proxy.port`,
`proxy.freeze()`. As a process (benchmarks/drafters/rpc_latency.py): `python -m
benchmarks.harness.tcp_proxy UPSTREAM_HOST:PORT --delay-ms 5` prints the port it listens on, then
serves until killed."""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading


class Proxy:
    def __init__(self, upstream: tuple[str, int], delay_s: float = 0.0) -> None:
        self.upstream, self.delay_s = upstream, delay_s
        self.port = 0
        self._frozen = threading.Event()
        self._ready = threading.Event()

    def freeze(self) -> None:
        self._frozen.set()

    async def serve(self) -> None:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await server.serve_forever()

    def start(self) -> Proxy:
        """Serve in a daemon thread of its own; returns once listening."""
        threading.Thread(target=lambda: asyncio.run(self.serve()), daemon=True).start()
        self._ready.wait(10)
        return self

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._pump(client_r, up_w), self._pump(up_r, client_w), return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self._frozen.is_set():
                    await asyncio.Event().wait()  # forever: nothing more goes through
                if not data:
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()

        task = asyncio.ensure_future(deliver())
        while True:
            data = await reader.read(1 << 16)
            if self._frozen.is_set():
                await asyncio.Event().wait()
            queue.put_nowait((loop.time() + self.delay_s, data))
            if not data:
                break
        await task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("upstream", help="HOST:PORT to forward to")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    args = ap.parse_args()
    host, _, port = args.upstream.partition(":")
    proxy = Proxy((host, int(port)), args.delay_ms / 1e3)

    async def run() -> None:
        task = asyncio.ensure_future(proxy.serve())
        while not proxy.port:
            await asyncio.sleep(0.01)
        print(proxy.port, flush=True)
        await task

    asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())
