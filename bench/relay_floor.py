"""The machine's floor for server CPU per streamed delta: the least any streaming server can spend.

Run: ``.venv/bin/python bench/relay_floor.py`` (about ten seconds); ``bench/scale.py``
prints it beside its own figure.

A bare relay, in the shape of the app's per-delta path with everything of the app taken
out: under uvloop (the app's event loop), a child process prints one short line every
1/``--rate`` seconds; the relay reads each line from the pipe the moment it comes and
writes it to a TCP client in another process, as an SSE server does. The figure is the
relay process's CPU time (``time.process_time``) per line. It is mostly what waking a
sleeping process costs on this machine (the scheduler, the VM's exits, the socket's
wake-up of the reader), which the app pays at least once per delta at a model's pace.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

WRITER = (
    "import sys, time\n"
    "n, pause = int(sys.argv[1]), float(sys.argv[2])\n"
    "for _ in range(n):\n"
    "    sys.stdout.write('x' * 60 + '\\n'); sys.stdout.flush(); time.sleep(pause)\n"
)
READER = "import socket, sys\ns = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\nwhile s.recv(65536): pass\n"


async def _relay(lines: int, rate: float) -> float:
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WRITER, str(lines + 1), str(1 / rate), stdout=subprocess.PIPE
        )
        assert child.stdout is not None
        await child.stdout.readline()  # the first line starts the clock, so start-up is not in it
        started, relayed = time.process_time(), 0
        while line := await child.stdout.readline():
            writer.write(b"data: " + line + b"\n")
            relayed += 1
        spent = time.process_time() - started
        writer.close()
        await child.wait()
        done.set_result(spent / relayed * 1e3)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader = await asyncio.create_subprocess_exec(sys.executable, "-c", READER, str(port))
    try:
        return await done
    finally:
        server.close()
        await reader.wait()


def measure(rate: float = 50.0, seconds: float = 6.0) -> float:
    """CPU ms per line of a bare uvloop relay at ``rate`` lines a second."""
    import uvloop

    return uvloop.run(_relay(max(10, int(rate * seconds)), rate))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=50.0, help="lines a second (default 50)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long (default 6)")
    args = parser.parse_args()
    print(
        f"bare relay floor at {args.rate:g} lines/s: {measure(args.rate, args.seconds):.3f} ms CPU per line"
    )


if __name__ == "__main__":
    main()
