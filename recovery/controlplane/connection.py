"""Where Redis comes from: the one place that turns a URL into a client.

With no URL (neither ``--redis`` nor ``RECOVERY_REDIS_URL``) the project uses the *embedded*
server (recovery/controlplane/embedded.py), started on demand. URLs are shown with their passwords
masked (:func:`describe`).

A URL may name a single server or any node of a Redis Cluster (``redis://host:port``,
``rediss://...``): ``INFO cluster`` tells them apart, and a cluster node gets redis-py's
``RedisCluster``, which finds the other masters from it. Both answer the same commands for
keys of one hash slot (tracking/keys.py says which keys share one); :func:`is_cluster` says
which one a client is, where the code must split a step by slot.
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import redis
from redis.cluster import RedisCluster

from recovery.controlplane.embedded import EmbeddedServer
from recovery.environment import environment
from recovery.errors import RecoveryError, RedisUnavailable
from recovery.home import read_private

log = logging.getLogger(__name__)

__all__ = ["RedisUnsupported", "connect", "describe", "is_cluster", "make_client", "resolve_url",
           "scan_keys"]

URL_ENV = "RECOVERY_REDIS_URL"
# A URL without a password takes one from here (a file, or the environment), never from a
# command line: `ps` shows every process's arguments to every user of the host
PASSWORD_ENV = "REDIS_PASSWORD"
PASSWORD_FILE_ENV = "RECOVERY_REDIS_PASSWORD_FILE"
SCHEMES = ("redis://", "rediss://", "unix://")

#: Socket timeouts of every client made here (seconds); callers may override per call.
CONNECT_TIMEOUT = 5.0
SOCKET_TIMEOUT = 60.0


# --------------------------------------------------------------------------- URLs

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)?(?P<user>.*)@(?P<rest>.*)$", re.S)
_QUERY_SECRET = re.compile(r"(?P<key>[?&](?:password|pass|pwd)=)[^&#]*", re.I)


def client_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options every client of ours takes (a single server's or a cluster's), then the caller's."""
    return {"decode_responses": False, "socket_connect_timeout": CONNECT_TIMEOUT,
            "socket_timeout": SOCKET_TIMEOUT, "health_check_interval": 30, **options}


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
    kwargs = client_options(options)
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
    """A Redis this tool cannot work with (a cluster node reached through a unix socket)."""


def is_cluster(client: Any) -> bool:
    """Whether `client` talks to a Redis Cluster (a RedisCluster), where a transaction or a
    script may only touch the keys of one hash slot."""
    return isinstance(client, RedisCluster)


def scan_keys(client: Any, pattern: str, count: int = 1000) -> Iterator[bytes]:
    """Every key matching `pattern`: SCAN of the server, or of each master of a Redis Cluster
    (replicas hold copies of their masters' keys)."""
    if not is_cluster(client):
        yield from client.scan_iter(match=pattern, count=count)
        return
    for node in client.get_primaries():
        yield from client.scan_iter(match=pattern, count=count, target_nodes=node)


def _cluster_enabled(client: redis.Redis, url: str, what: str) -> bool:
    """Is the server a Redis Cluster node? INFO cluster says so."""
    try:
        info = client.info("cluster")
    except redis.ResponseError as err:   # INFO renamed or denied (ACL): nothing tells it is one
        log.debug("%s: INFO cluster refused (%s); taken for a single server", what, err)
        return False
    except (redis.RedisError, OSError) as err:
        client.close()
        raise RedisUnavailable(f"cannot reach {what}: {one_line_error(err, url)}") from None
    return str(info.get("cluster_enabled", 0)) == "1"


def _cluster_client(url: str, what: str, **options: Any) -> redis.Redis:
    """A RedisCluster from one node's URL (it discovers the others), verified: every slot
    served (CLUSTER INFO cluster_state ok), or one line saying why not."""
    if url.lower().startswith("unix://"):
        raise RedisUnsupported(f"{what} is a Redis Cluster node reached through a unix socket; "
                               "give its redis://host:port URL")
    kwargs = client_options(options)
    try:
        cluster = RedisCluster.from_url(url, **kwargs)
    except (redis.RedisError, OSError, ValueError, TypeError) as err:
        raise RedisUnavailable(f"cannot reach {what}: {one_line_error(err, url)}") from None
    try:
        state = cluster.cluster_info().get("cluster_state")
    except (redis.RedisError, OSError) as err:
        cluster.close()
        raise RedisUnavailable(f"cannot reach {what}: {one_line_error(err, url)}") from None
    if state not in ("ok", b"ok"):
        cluster.close()
        raise RedisUnavailable(f"{what} is a Redis Cluster node whose cluster is not ok "
                               f"(cluster_state:{state}); fix the cluster first")
    # RedisCluster answers the same commands as Redis for keys of one slot (every key set
    # the project makes one transaction or script of shares one: tracking/keys.py)
    return cast(redis.Redis, cluster)


def password_from_environment() -> str | None:
    """The password in the file ``$RECOVERY_REDIS_PASSWORD_FILE`` names (its first line), else
    ``$REDIS_PASSWORD``; None when neither is set."""
    path = environment().redis_password_file
    if path:
        what = f"the Redis password file {path} (${PASSWORD_FILE_ENV})"
        try:   # private, as the web view's token files are (mode 0600 or stricter)
            first = read_private(path, what, limit=64 * 1024).partition("\n")[0].rstrip("\r")
        except RecoveryError as err:
            raise RedisUnavailable(str(err)) from None
        if not first:
            raise RedisUnavailable(f"the Redis password file {path} (${PASSWORD_FILE_ENV}) is empty")
        return first
    return os.environ.get(PASSWORD_ENV) or None


def with_password(url: str) -> str:
    """``url`` with the password of :func:`password_from_environment` when it has none (a
    ``redis://``/``rediss://`` URL's user info, a ``unix://`` URL's ``password`` parameter)."""
    parts = urlsplit(url.strip())
    if parts.password is not None or _QUERY_SECRET.search(url):
        return url
    secret = password_from_environment()
    if secret is None:
        return url
    scheme, netloc, path, query, fragment = parts
    if scheme.lower() == "unix":   # (urlunsplit would drop the empty host's "//")
        base, _, _ = url.strip().partition("#")
        return f"{base}{'&' if query else '?'}password={quote(secret, safe='')}"
    user = quote(unquote(parts.username), safe="") if parts.username else ""
    netloc = f"{user}:{quote(secret, safe='')}@{netloc.rpartition('@')[2]}"
    return urlunsplit((scheme, netloc, path, query, fragment))


def resolve_url(url: str | None = None, home: str | os.PathLike[str] | None = None,
                start: bool = True) -> str:
    """The URL :func:`connect` would use: ``url``, else ``$RECOVERY_REDIS_URL``, else the
    embedded server's (started here when ``start``), with a password from the environment
    when it has none (:func:`with_password`). What Spark tasks get: the URL travels with the
    job (the round's RunSpec), not in the executors' environment."""
    url = url or environment().redis_url
    if url:
        return with_password(url)
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
    A Redis Cluster node's URL gives a RedisCluster client (module doc).
    Raises RedisUnavailable with a one-line reason naming the URL without its password.
    """
    url = url or environment().redis_url
    if url:
        url = with_password(url)
        what = f"Redis at {describe(url)}"
        client = make_client(url, **options)
        _verify(client, url, what)
        if _cluster_enabled(client, url, what):
            client.close()
            client = _cluster_client(url.strip(), what, **options)
            log.info("connected to the Redis Cluster of %s (%d masters)", describe(url),
                     len(cast(RedisCluster, client).get_primaries()))
            return client
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

