"""Where Redis comes from: the one place that turns a URL into a client.

With no URL (neither ``--redis`` nor ``RECOVERY_REDIS_URL``) the project uses the *embedded*
server (recovery/redis/embedded.py), started on demand. URLs are shown with their passwords
masked (:func:`describe`).
"""
from __future__ import annotations

import logging
import os
import re
from typing import Any

import redis

from recovery.errors import RecoveryError, RedisUnavailable
from recovery.redis.embedded import EmbeddedServer

log = logging.getLogger(__name__)

__all__ = ["RedisUnsupported", "connect", "describe", "make_client", "resolve_url"]

URL_ENV = "RECOVERY_REDIS_URL"
SCHEMES = ("redis://", "rediss://", "unix://")

#: Socket timeouts of every client made here (seconds); callers may override per call.
CONNECT_TIMEOUT = 5.0
SOCKET_TIMEOUT = 60.0


# --------------------------------------------------------------------------- URLs

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)?(?P<user>.*)@(?P<rest>.*)$", re.S)
_QUERY_SECRET = re.compile(r"(?P<key>[?&](?:password|pass|pwd)=)[^&#]*", re.I)


def describe(url: str | None) -> str:
    """``url`` fit to print: any password (``user:PASSWORD@``, ``?password=``) replaced by ``***``.

    ``None`` describes the embedded server.
    """
    if url is None:
        return "the embedded Redis"
    text = str(url)
    m = _USERINFO.match(text)
    if m:
        user = m.group("user")
        if ":" in user:
            name, _, secret = user.partition(":")
            user = f"{name}:***" if secret else f"{name}:"
        elif user:
            # A lone userinfo is a user name to redis-py, but people put passwords there.
            user = "***"
        text = f"{m.group('scheme') or ''}{user}@{m.group('rest')}"
    text = _QUERY_SECRET.sub(lambda q: q.group("key") + "***", text)
    return " ".join(text.split())  # one line, always


def _url_secrets(url: str) -> list[str]:
    """The literal secrets in ``url``, to scrub them from error messages."""
    secrets: list[str] = []
    m = _USERINFO.match(url)
    if m:
        user = m.group("user")
        secret = user.partition(":")[2] if ":" in user else user
        if secret:
            secrets.append(secret)
    for q in re.finditer(r"[?&](?:password|pass|pwd)=([^&#]*)", url, re.I):
        if q.group(1):
            secrets.append(q.group(1))
    return secrets


def one_line_error(err: BaseException, url: str) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    for secret in _url_secrets(url):
        text = text.replace(secret, "***")
    return text.rstrip(".")


def make_client(url: str, **options: Any) -> redis.Redis:
    """A client for ``url`` (redis://, rediss://, unix://; user, password and db as redis-py
    reads them), raw bytes replies and bounded socket timeouts. Does not connect.

    Raises RedisUnavailable (naming the URL, password masked) when the URL is not one.
    """
    if not isinstance(url, str) or not url.strip().lower().startswith(SCHEMES):
        raise RedisUnavailable(
            f"invalid Redis URL '{describe(url)}': it must start with redis://, rediss:// or unix://")
    url = url.strip()
    kwargs: dict[str, Any] = {
        "decode_responses": False,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": SOCKET_TIMEOUT,
        "health_check_interval": 30,
    }
    kwargs.update(options)
    try:
        return redis.Redis.from_url(url, **kwargs)
    except (ValueError, TypeError) as err:
        raise RedisUnavailable(f"invalid Redis URL {describe(url)}: {one_line_error(err, url)}") from None


def _verify(client: redis.Redis, url: str, what: str) -> None:
    try:
        client.ping()
    except (redis.RedisError, OSError) as err:
        client.close()
        raise RedisUnavailable(f"cannot reach {what}: {one_line_error(err, url)}") from None


class RedisUnsupported(RecoveryError):
    """A Redis this tool cannot work with yet (a Redis Cluster node)."""


def _refuse_cluster(client: redis.Redis, url: str, what: str) -> None:
    """A Redis Cluster node is refused in one line: a run's keys span hash slots, which a
    cluster refuses (CROSSSLOT) in the middle of a submit. INFO cluster says what it is."""
    try:
        info = client.info("cluster")
    except redis.ResponseError as err:   # INFO renamed or denied (ACL): nothing tells it is one
        log.debug("%s: INFO cluster refused (%s); taken for a single server", what, err)
        return
    except (redis.RedisError, OSError) as err:
        client.close()
        raise RedisUnavailable(f"cannot reach {what}: {one_line_error(err, url)}") from None
    if str(info.get("cluster_enabled", 0)) == "1":
        client.close()
        raise RedisUnsupported(f"{what} is a Redis Cluster node; Redis Cluster is not supported yet "
                               "(use a single server)")


def resolve_url(url: str | None = None, home: str | os.PathLike[str] | None = None,
                start: bool = True) -> str:
    """The URL :func:`connect` would use: ``url``, else ``$RECOVERY_REDIS_URL``, else the
    embedded server's (started here when ``start``). Useful to hand to Spark tasks."""
    url = url or os.environ.get(URL_ENV) or None
    if url:
        return url
    server = EmbeddedServer(home)
    if start:
        server.start()
    return server.url


def connect(url: str | None = None, home: str | os.PathLike[str] | None = None,
            start: bool = True, **options: Any) -> redis.Redis:
    """A verified (PINGed) client.

    ``url`` (or ``$RECOVERY_REDIS_URL``) names a real server; without one, the embedded server
    under ``home`` (see :func:`state_home`) is used, started on demand when ``start`` is true.
    ``options`` override the client's keyword arguments (e.g. ``socket_timeout``).
    Raises RedisUnavailable with a one-line reason naming the URL without its password, and
    RedisUnsupported for a Redis Cluster node (not supported yet).
    """
    url = url or os.environ.get(URL_ENV) or None
    if url:
        client = make_client(url, **options)
        _verify(client, url, f"Redis at {describe(url)}")
        _refuse_cluster(client, url, f"Redis at {describe(url)}")
        log.info("connected to Redis at %s", describe(url))
        return client
    server = EmbeddedServer(home)
    if start:
        server.start()
    elif not server.ping():
        raise RedisUnavailable(
            f"the embedded Redis under {server.home} is not running "
            "(start it with `recovery server start`, or give --redis URL)")
    client = make_client(server.url, **options)
    _verify(client, server.url, f"the embedded Redis at {server.url}")
    log.info("connected to the embedded Redis at %s", server.url)
    return client

