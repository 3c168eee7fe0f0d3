"""Run a queue worker: take runs off the run queue and supervise them until SIGTERM.

For deployments whose web processes only accept, stream and relay (``RUN_WORKER=off``);
with the embedded default every web process runs a worker of its own and this command is
not needed. The worker runs up to ``--concurrency`` runs at once (default
``RUN_WORKER_CONCURRENCY``) and fetches no more messages than it has free slots. Its runs'
MCP servers reach the app at ``INTERNAL_BASE_URL``, which must be a web process of this
deployment on this host's loopback. On SIGTERM (or SIGINT) it stops taking runs, stops
its own (their streams end with their closing events) and exits within seconds.
"""

from __future__ import annotations

import asyncio
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from promptmgr.lifecycle import serve_worker


class Command(BaseCommand):
    help = "Take runs off the run queue and supervise them (for RUN_WORKER=off web tiers)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            metavar="N",
            help="Runs at once (default: RUN_WORKER_CONCURRENCY).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        concurrency = options["concurrency"] or settings.RUN_WORKER_CONCURRENCY
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        if options["verbosity"] > 0:
            self.stdout.write(f"Taking runs off the queue, {concurrency} at once; Ctrl+C or SIGTERM stops.")
        asyncio.run(serve_worker(concurrency))
        if options["verbosity"] > 0:
            self.stdout.write(self.style.SUCCESS("Stopped."))
