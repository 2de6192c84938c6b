"""A TCP proxy that limits the bytes per second going to its upstream: a stand-in for one
server's network link, so that a test on loopback (where every byte costs the same CPU) can
tell servers loaded at the same time from servers loaded one after the other.

    with RateLimitedProxy("127.0.0.1:50052", mb_per_s=20) as p:
        p.endpoint  # "127.0.0.1:PORT": connect here instead.
"""
import asyncio
import socket
import threading
import time


class RateLimitedProxy:
    CHUNK = 64 << 10

    def __init__(self, upstream, mb_per_s):
        self.host, port = upstream.rsplit(":", 1)
        self.port = int(port)
        self.rate = mb_per_s * 1e6
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _shutdown(self):
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{sock.getsockname()[1]}"
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, sock=sock))
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, client_r, client_w):
        try:
            up_r, up_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._pump(client_r, up_w, self.rate), self._pump(up_r, client_w, None),
                             return_exceptions=True)

    async def _pump(self, reader, writer, rate):
        start, sent = time.monotonic(), 0
        try:
            while True:
                data = await reader.read(self.CHUNK)
                if not data:
                    break
                if rate:
                    sent += len(data)
                    ahead = start + sent / rate - time.monotonic()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                    elif ahead < -0.05:  # idle a while: no burst to catch up.
                        start, sent = time.monotonic(), 0
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
