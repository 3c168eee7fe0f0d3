"""Make sure the demo login exists: user ``demo`` (a superuser) with a sample project.

The password comes from ``DEMO_PASSWORD`` (default ``demo-password``) and is reset to it
on every run, so the printed credentials always work. Safe to run on every start.
"""

from __future__ import annotations

import os
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from promptmgr.services.demo import DEMO_USERNAME, demo_user_ensure


class Command(BaseCommand):
    help = "Create (or repair) the demo superuser and its sample project; print how to log in."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--base-url",
            default=settings.INTERNAL_BASE_URL,
            help="Where the app is served, for the printed login URL (default: INTERNAL_BASE_URL).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get("DEMO_PASSWORD", "demo-password")
        result = demo_user_ensure(password=password)
        if options["verbosity"] < 1:
            return
        if result.user_created:
            self.stdout.write(f"Created user {DEMO_USERNAME}.")
        if result.project_created:
            self.stdout.write(f"Created project “{result.project_name}”.")
        login_url = options["base_url"].rstrip("/") + "/accounts/login/"
        self.stdout.write(self.style.SUCCESS(f"Log in at {login_url}"))
        self.stdout.write(f"  username: {DEMO_USERNAME}")
        self.stdout.write(f"  password: {password}")
