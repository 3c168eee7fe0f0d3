"""Entry point: ``python -m mcp_server`` serves the ask-user tools over stdio.

With ``ASK_USER_WARM`` set (the app's warm server, ``mcp_server.warm``), a forked, already
imported server serves this process's stdio and this process only stands for it; without
it, or when the warm server does not serve, the tools are served here.
"""

from __future__ import annotations

import os
import sys

from .stub import WARM_ENV_VAR, serve_through


def serve_here() -> None:
    import anyio

    from .server import build_server

    # uvloop: the server's loop wakes for every relay reply and every line from the CLI.
    anyio.run(build_server().run_stdio_async, backend_options={"use_uvloop": True})


def main() -> None:
    warm = os.environ.get(WARM_ENV_VAR)
    if warm:
        code = serve_through(warm)
        if code is not None:
            sys.exit(code)
    serve_here()


if __name__ == "__main__":
    main()
