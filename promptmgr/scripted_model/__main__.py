"""``python -m promptmgr.scripted_model --port 8001``: serve the scripted model."""

from __future__ import annotations

import argparse

import uvicorn

from .server import create_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--pace-ms", type=float, default=0.0, help="pause before each text chunk")
    parser.add_argument("--chunk-chars", type=int, default=16, help="characters per text delta")
    args = parser.parse_args()
    app = create_app(pace_ms=args.pace_ms, chunk_chars=args.chunk_chars)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
