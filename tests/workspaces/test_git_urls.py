"""Which repository URLs a project may be cloned from: decided before git ever runs."""

from __future__ import annotations

from typing import Any

import pytest

from promptmgr.git import urls

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("https://github.com/acme/app.git", "https"),
        ("ssh://git@github.com/acme/app.git", "ssh"),
        ("git+ssh://git@host/acme/app.git", "ssh"),
        ("git@github.com:acme/app.git", "ssh"),
        ("host.example:acme/app.git", "ssh"),
        ("file:///srv/repos/app.git", "file"),
        ("/srv/repos/app.git", "file"),
        ("http://git.local/app.git", "http"),
        ("git://git.local/app.git", "git"),
        ("https://user@github.com/acme/app.git", "https"),
    ],
)
def test_urls_are_classified_as_git_reads_them(url: str, scheme: str) -> None:
    assert urls.url_scheme(url) == scheme


@pytest.mark.parametrize("url", ["ext::sh -c touch% /tmp/pwned", "fd::17", "EXT::sh", "fd::0,1/x"])
def test_ext_and_fd_transports_are_refused_whatever_the_setting(settings: Any, url: str) -> None:
    settings.WORKSPACE_GIT_SCHEMES = ("https", "ssh", "http", "git", "file")
    with pytest.raises(urls.InvalidGitUrl) as refused:
        urls.allowed_scheme(url)
    assert str(refused.value) == urls.TRANSPORT_REFUSED.format(transport=url.split("::")[0].lower())


def test_other_remote_helpers_are_refused_as_schemes_not_allowed() -> None:
    with pytest.raises(urls.InvalidGitUrl, match="not persistent-https::"):
        urls.allowed_scheme("persistent-https::https://host/app.git")


def test_the_production_default_allows_https_and_ssh_only(settings: Any) -> None:
    settings.WORKSPACE_GIT_SCHEMES = ("https", "ssh")
    assert urls.allowed_scheme("https://host/app.git") == "https"
    assert urls.allowed_scheme("git@host:app.git") == "ssh"
    for url, scheme in [("file:///srv/app.git", "file"), ("/srv/app.git", "file"), ("http://h/a", "http")]:
        with pytest.raises(urls.InvalidGitUrl) as refused:
            urls.allowed_scheme(url)
        assert str(refused.value) == urls.SCHEME_REFUSED.format(allowed="https, ssh", scheme=scheme)


def test_a_password_in_the_url_is_refused() -> None:
    with pytest.raises(urls.InvalidGitUrl) as refused:
        urls.url_scheme("https://user:ghp_secret@github.com/acme/app.git")
    assert str(refused.value) == urls.URL_WITH_PASSWORD


@pytest.mark.parametrize(
    "url",
    [
        "",
        "-uhttps://host/x",
        "--upload-pack=touch /tmp/x",
        "ssh://-oProxyCommand=touch/x",
        "-oProxyCommand=x:path",
        "relative/path.git",
        "https://host/a b.git",
        "https://host/a\n.git",
        "https:///nohost.git",
        "file://otherhost/srv/app.git",
    ],
)
def test_what_git_could_take_for_an_option_or_cannot_clone_is_invalid(url: str) -> None:
    with pytest.raises(urls.InvalidGitUrl) as refused:
        urls.url_scheme(url)
    assert str(refused.value) == urls.URL_INVALID


@pytest.mark.parametrize("ref", ["main", "release/2.0", "v1.2.3", "feature_x-1"])
def test_branch_and_tag_names_pass(ref: str) -> None:
    urls.check_ref(ref)


@pytest.mark.parametrize(
    "ref", ["-b", "--upload-pack=x", "a..b", "a b", "x.lock", "/abs", "a//b", "a/.b", "ref~1"]
)
def test_refs_git_could_misread_are_refused(ref: str) -> None:
    with pytest.raises(urls.InvalidGitUrl, match="not a branch or tag name"):
        urls.check_ref(ref)
