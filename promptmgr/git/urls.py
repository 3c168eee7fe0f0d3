"""Which repository URLs a project may be cloned from, and which refs it may start from.

A URL is classified the way git would read it (``scheme://``, scp-like ``user@host:path``,
a local path, or ``transport::address``) and refused unless its scheme is in
``WORKSPACE_GIT_SCHEMES``. git's ``ext::`` and ``fd::`` transports run programs, so they
are refused whatever the setting says. A password in the URL is refused too: the URL is
stored in the repository's config, which every worktree (and every run) can read.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.conf import settings

TRANSPORT_REFUSED = "git's “{transport}::” transport runs programs on the server; it is never allowed."
SCHEME_REFUSED = "This server clones repositories over {allowed} only, not {scheme}."
URL_WITH_PASSWORD = (
    "Put the access token in the token field, not in the URL: the URL is stored in the "
    "repository's configuration, which every worktree shares."
)
URL_INVALID = (
    "That is not a repository URL git can clone, such as https://host/owner/repo.git "
    "or git@host:owner/repo.git."
)
REF_INVALID = "That is not a branch or tag name git accepts."

ALWAYS_REFUSED_TRANSPORTS = frozenset({"ext", "fd"})
SCHEME_ALIASES = {"git+ssh": "ssh", "ssh+git": "ssh"}
_TRANSPORT = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)::")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# scp-like syntax: no slash before the first colon ("host:path", "user@host:path").
_SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^@/:]+):(?P<path>.+)$")
_REF = re.compile(r"^[A-Za-z0-9._/+-]+$")


class InvalidGitUrl(ValueError):
    """``str()`` says why, in a sentence for the user."""


def url_scheme(url: str) -> str:
    """The scheme git would clone ``url`` over (``https``, ``ssh``, ``file``…), whether or
    not this server allows it; raises ``InvalidGitUrl`` for what git must never see."""
    transport = _TRANSPORT.match(url)
    if transport and transport.group(1).lower() in ALWAYS_REFUSED_TRANSPORTS:
        raise InvalidGitUrl(TRANSPORT_REFUSED.format(transport=transport.group(1).lower()))
    if not url or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url) or url.startswith("-"):
        raise InvalidGitUrl(URL_INVALID)
    if transport:
        return f"{transport.group(1).lower()}::"
    if _SCHEME.match(url):
        return _scheme_of_url(url)
    if url.startswith("/"):
        return "file"
    scp = _SCP_LIKE.match(url)
    if scp and not scp.group("host").startswith("-") and not (scp.group("user") or "").startswith("-"):
        return "ssh"
    raise InvalidGitUrl(URL_INVALID)


def _scheme_of_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        password = parts.password
        host = parts.hostname or ""
    except ValueError:
        raise InvalidGitUrl(URL_INVALID) from None
    scheme = SCHEME_ALIASES.get(parts.scheme.lower(), parts.scheme.lower())
    if password is not None:
        raise InvalidGitUrl(URL_WITH_PASSWORD)
    if scheme == "file":
        if host not in ("", "localhost") or not parts.path:
            raise InvalidGitUrl(URL_INVALID)
    elif not host or host.startswith("-"):
        raise InvalidGitUrl(URL_INVALID)
    return scheme


def allowed_scheme(url: str) -> str:
    """``url``'s scheme if this server allows cloning over it; else ``InvalidGitUrl``."""
    scheme = url_scheme(url)
    allowed = tuple(settings.WORKSPACE_GIT_SCHEMES)
    if scheme not in allowed:
        raise InvalidGitUrl(SCHEME_REFUSED.format(allowed=", ".join(allowed), scheme=scheme))
    return scheme


def check_ref(ref: str) -> None:
    """A branch or tag name safe to hand to ``git clone --branch`` (never an option)."""
    bad = (
        not _REF.match(ref)
        or ref.startswith(("-", ".", "/"))
        or ref.endswith(("/", ".", ".lock"))
        or any(part in ref for part in ("..", "//", "/."))
    )
    if bad:
        raise InvalidGitUrl(REF_INVALID)
