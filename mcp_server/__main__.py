"""Entry point: ``python -m mcp_server`` serves the ask-user tools over stdio."""

from __future__ import annotations

from .server import build_server


def main() -> None:
    build_server().run("stdio")


if __name__ == "__main__":
    main()
