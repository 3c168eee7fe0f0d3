"""Entry point: ``python -m mcp_server`` serves the ask-user tools over stdio."""

from __future__ import annotations

import anyio

from .server import build_server


def main() -> None:
    # uvloop: the server's loop wakes for every relay reply and every line from the CLI.
    anyio.run(build_server().run_stdio_async, backend_options={"use_uvloop": True})


if __name__ == "__main__":
    main()
