"""Group membership from an LDAP directory (Active Directory, OpenLDAP): --ldap-url.

A session whose principal becomes known asks for its user's groups (the LookUpGroups effect,
protocol/identity/directory.py) and waits for them. They come from a cache or the directory:

* `LdapDirectory` asks the directory, blocking, with ldap3 (pure Python: nothing to build,
  a wheel on every platform), in a few threads of its own (`LDAP_WORKERS`), never on the
  event loop: find the user (a search, or a DN template), then the groups whose filter names
  it, and optionally the groups of those groups. Each thread keeps its connection (bound as
  --ldap-bind-dn) and opens a new one when the kept one fails.
* `MembershipCache` keeps the last answer per user, at most --ldap-cache-max-entries (least
  recently used dropped), and says how fresh it is: younger than --ldap-cache-ttl, used as
  is; older but within --ldap-max-stale, used at once while the directory is asked again in
  the background; older still (or none), the session waits for the directory.
* `LdapGroups` runs it on the event loop: one lookup per user at a time (the others wait for
  it), sessions kept in step with the answers (a user dropped from a group loses it on its
  open connections, within the TTL), a background pass that asks again for the users that
  have open connections, and the failure rules: while the directory cannot be reached, the
  last answer is used until it is --ldap-max-stale old, then the user's sessions have no
  groups from the directory (fail closed); /readyz and the metrics say so.

Bounds: at most `MAX_GROUPS` + 1 group names are kept per user (more refuse the session,
protocol/identity/groups.py), nested groups are followed `MAX_NESTING` levels deep, at most
`MAX_LOOKUPS` lookups wait for a thread at once (past it, and while the directory is failing
and backing off, a lookup is answered from the cache alone).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import math
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import Counter, Gauge

from aclgate.protocol.identity.groups import MAX_GROUPS
from aclgate.proxy.config import ProxyConfig
from aclgate.proxy.ops.logs import log_safe
from aclgate.proxy.security.oauthtoken import SecretFile

log = logging.getLogger("aclgate.ldap")

#: threads asking the directory (each with its own connection)
LDAP_WORKERS = 4
#: lookups waiting for a thread at most; past it a lookup is answered from the cache alone
MAX_LOOKUPS = 1000
#: levels of nested groups followed (--ldap-nested-groups)
MAX_NESTING = 8
#: group DNs put into one search of nested groups
NESTED_BATCH = 50
#: the wait before asking a failing directory again, doubling up to the maximum (seconds)
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
#: the outcomes of aclgate_ldap_lookups_total
OUTCOMES = ("found", "not_found", "ambiguous", "failed", "skipped")

NO_NAMES: frozenset[str] = frozenset()


@dataclass(frozen=True)
class LdapSettings:
    """The --ldap-* settings (ProxyConfig.validate checked them)."""

    urls: tuple[str, ...]
    bind_dn: str | None = None
    bind_password_file: Path | None = None
    user_search_base: str | None = None
    user_filter: str = "(uid={user})"
    user_dn_template: str | None = None
    group_search_base: str = ""
    group_filter: str = "(member={dn})"
    group_name_attribute: str = "cn"
    nested_groups: bool = False
    cache_ttl: float = 300.0
    max_stale: float = 900.0
    cache_max_entries: int = 10_000
    timeout: float = 5.0
    start_tls: bool = False
    ssl_cafile: Path | None = None

    @classmethod
    def from_config(cls, config: ProxyConfig) -> LdapSettings | None:
        """None when --ldap-url is not given."""
        if not config.ldap_urls:
            return None
        return cls(
            urls=config.ldap_urls,
            bind_dn=config.ldap_bind_dn,
            bind_password_file=config.ldap_bind_password_file,
            user_search_base=config.ldap_user_search_base,
            user_filter=config.ldap_user_filter,
            user_dn_template=config.ldap_user_dn_template,
            group_search_base=config.ldap_group_search_base or "",
            group_filter=config.ldap_group_filter,
            group_name_attribute=config.ldap_group_name_attribute,
            nested_groups=config.ldap_nested_groups,
            cache_ttl=config.ldap_cache_ttl,
            max_stale=config.ldap_max_stale,
            cache_max_entries=config.ldap_cache_max_entries,
            timeout=config.ldap_timeout,
            start_tls=config.ldap_start_tls,
            ssl_cafile=config.ldap_ssl_cafile,
        )


# ------------------------------------------------------------------ the directory (blocking)


class DirectoryError(Exception):
    """The directory could not answer (unreachable, refused the bind, an error result)."""


@dataclass(frozen=True)
class Membership:
    """The directory's answer for one user: its group names and how it was found."""

    names: frozenset[str]
    #: found, not_found (no such user: no groups) or ambiguous (several entries: no groups)
    outcome: str


class LdapDirectory:
    """Blocking lookups with ldap3, safe to call from several threads at once (a connection
    per thread)."""

    def __init__(self, settings: LdapSettings):
        import ldap3

        self.settings = settings
        self._local = threading.local()
        self._lock = threading.Lock()
        self._password = (
            SecretFile(settings.bind_password_file, "LDAP bind password file")
            if settings.bind_password_file is not None
            else None
        )
        self._tls = None
        if settings.start_tls or any(u.lower().startswith("ldaps:") for u in settings.urls):
            self._tls = ldap3.Tls(
                validate=ssl.CERT_REQUIRED,
                ca_certs_file=str(settings.ssl_cafile) if settings.ssl_cafile else None,
            )

    # connections ---------------------------------------------------------------------

    def _open(self, url: str) -> Any:
        import ldap3

        # a Server of its own for each connection: ldap3 remembers an address that failed
        # as unavailable for a while, and a Server is not to be shared between threads
        server = ldap3.Server(
            url,
            connect_timeout=self.settings.timeout,
            get_info=ldap3.NONE,
            tls=self._tls,
            use_ssl=url.lower().startswith("ldaps:"),
        )
        password = None
        if self._password is not None:
            with self._lock:
                password = self._password.current()
        conn = ldap3.Connection(
            server,
            user=self.settings.bind_dn,
            password=password,
            read_only=True,
            raise_exceptions=True,
            # whole seconds: ldap3 packs it into SO_RCVTIMEO as an integer
            receive_timeout=max(1, math.ceil(self.settings.timeout)),
            auto_referrals=False,
            client_strategy=ldap3.SYNC,
        )
        try:
            conn.open()
            if self.settings.start_tls:
                conn.start_tls()
            conn.bind()
        except BaseException:
            _close(conn)
            raise
        return conn

    def _connection(self) -> Any:
        """This thread's bound connection: the kept one, or a new one to the first URL that
        answers."""
        from ldap3.core.exceptions import LDAPException

        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        problems = []
        for url in self.settings.urls:
            try:
                conn = self._open(url)
            except (LDAPException, OSError, ValueError) as exc:
                problems.append(f"{url}: {_describe(exc)}")
                continue
            self._local.conn = conn
            return conn
        raise DirectoryError("; ".join(problems))

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            _close(conn)

    def _with_connection(self, work: Callable[[Any], Membership]) -> Membership:
        """`work(connection)`; a kept connection that fails (closed by the directory while
        idle) is replaced once."""
        from ldap3.core.exceptions import LDAPException

        for attempt in (1, 2):
            kept = getattr(self._local, "conn", None) is not None
            conn = self._connection()
            try:
                return work(conn)
            except (LDAPException, OSError) as exc:
                self._drop()
                if attempt == 2 or not kept:
                    raise DirectoryError(_describe(exc)) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Drop this thread's connection (the others end with their threads)."""
        self._drop()

    def probe(self) -> None:
        """Connect and bind (DirectoryError if that fails): is the directory there?"""
        self._with_connection(lambda conn: Membership(NO_NAMES, "found"))

    # lookups -------------------------------------------------------------------------

    def groups_of(self, user: str) -> Membership:
        """The group names of `user` (DirectoryError when the directory cannot tell)."""
        return self._with_connection(lambda conn: self._groups(conn, user))

    def _groups(self, conn: Any, user: str) -> Membership:
        from ldap3.utils.conv import escape_filter_chars

        dn = self._user_dn(conn, user)
        if dn is None:
            return Membership(NO_NAMES, "not_found")
        if isinstance(dn, Membership):  # ambiguous
            return dn
        settings = self.settings
        template = settings.group_filter.replace("{user}", escape_filter_chars(user))
        found = self._search_groups(conn, template.replace("{dn}", escape_filter_chars(dn)))
        names = {name for _, name in found}
        if settings.nested_groups:
            seen = {group_dn.lower() for group_dn, _ in found}
            frontier = [group_dn for group_dn, _ in found]
            for _ in range(MAX_NESTING):
                if not frontier or len(names) > MAX_GROUPS:
                    break
                parents: list[tuple[str, str]] = []
                for start in range(0, len(frontier), NESTED_BATCH):
                    batch = frontier[start : start + NESTED_BATCH]
                    filters = "".join(
                        template.replace("{dn}", escape_filter_chars(group)) for group in batch
                    )
                    parents += self._search_groups(conn, f"(|{filters})")
                frontier = []
                for group_dn, name in parents:
                    if group_dn.lower() not in seen:
                        seen.add(group_dn.lower())
                        frontier.append(group_dn)
                        names.add(name)
        return Membership(frozenset(sorted(names)[: MAX_GROUPS + 1]), "found")

    def _user_dn(self, conn: Any, user: str) -> str | Membership | None:
        """The user's DN; None when there is no such user; a Membership when the search is
        ambiguous."""
        import ldap3
        from ldap3.core.exceptions import LDAPNoSuchObjectResult
        from ldap3.utils.conv import escape_filter_chars
        from ldap3.utils.dn import escape_rdn

        settings = self.settings
        if settings.user_dn_template is not None:
            dn = settings.user_dn_template.replace("{user}", escape_rdn(user))
            try:  # does it exist?
                conn.search(dn, "(objectClass=*)", ldap3.BASE, attributes=[], size_limit=1)
            except LDAPNoSuchObjectResult:
                return None
            return dn if _entries(conn) else None
        assert settings.user_search_base is not None  # validated: a base or a template
        user_filter = settings.user_filter.replace("{user}", escape_filter_chars(user))
        try:
            conn.search(
                settings.user_search_base,
                user_filter,
                ldap3.SUBTREE,
                attributes=[],
                size_limit=2,
                time_limit=max(1, round(settings.timeout)),
            )
        except LDAPNoSuchObjectResult:
            return None
        entries = _entries(conn)
        if len(entries) > 1:
            log.warning(
                "LDAP: %d entries match %s under %s: user %s gets no groups from the directory",
                len(entries),
                log_safe(user_filter),
                settings.user_search_base,
                log_safe(user),
            )
            return Membership(NO_NAMES, "ambiguous")
        return str(entries[0]["dn"]) if entries else None

    def _search_groups(self, conn: Any, search_filter: str) -> list[tuple[str, str]]:
        """(DN, name) of the groups `search_filter` finds, at most MAX_GROUPS + 1."""
        import ldap3
        from ldap3.core.exceptions import LDAPNoSuchObjectResult

        settings = self.settings
        attribute = settings.group_name_attribute
        try:
            conn.search(
                settings.group_search_base,
                search_filter,
                ldap3.SUBTREE,
                attributes=[attribute],
                size_limit=MAX_GROUPS + 1,
                time_limit=max(1, round(settings.timeout)),
            )
        except LDAPNoSuchObjectResult:
            return []
        found = []
        for entry in _entries(conn):
            value = _first_value(entry.get("attributes", {}), attribute)
            if value:
                found.append((str(entry["dn"]), value))
        return found


def _entries(conn: Any) -> list[dict[str, Any]]:
    """The entries of the last search (not the referrals Active Directory adds)."""
    return [e for e in conn.response or () if e.get("type") == "searchResEntry"]


def _first_value(attributes: Any, name: str) -> str | None:
    """The first value of attribute `name` (any case), as text."""
    for key, value in attributes.items():
        if key.lower() == name.lower():
            if isinstance(value, list | tuple):
                value = value[0] if value else None
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            return str(value) if value not in (None, "") else None
    return None


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


def _close(conn: Any) -> None:
    try:
        conn.unbind()
    except Exception:  # already broken: nothing more to say to it
        pass


# ------------------------------------------------------------------------- the cache (pure)


class Freshness(enum.Enum):
    FRESH = "fresh"  # younger than the TTL: used as is
    STALE = "stale"  # older, within max-stale: used now, asked again in the background
    EXPIRED = "expired"  # older than max-stale: not used, the session waits for the directory
    MISS = "miss"  # never asked (or dropped): the session waits for the directory


@dataclass(slots=True)
class _Entry:
    names: frozenset[str]
    #: when the directory gave this answer (the clock's seconds)
    answered_at: float


class MembershipCache:
    """user -> the directory's last answer, at most `max_entries` (least recently used
    dropped first); the clock is the caller's (tests pass their own)."""

    def __init__(self, ttl: float, max_stale: float, max_entries: int):
        self.ttl = ttl
        self.max_stale = max_stale
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, user: str, now: float) -> tuple[Freshness, frozenset[str]]:
        """How fresh the user's answer is, and its names (none unless FRESH or STALE)."""
        entry = self._entries.get(user)
        if entry is None:
            return Freshness.MISS, NO_NAMES
        self._entries.move_to_end(user)
        age = now - entry.answered_at
        if age < self.ttl:
            return Freshness.FRESH, entry.names
        if age <= self.max_stale:
            return Freshness.STALE, entry.names
        return Freshness.EXPIRED, NO_NAMES

    def usable(self, user: str, now: float) -> frozenset[str]:
        """The names the user's sessions may have now: the last answer while it is at most
        max-stale old, else none (fail closed)."""
        entry = self._entries.get(user)
        if entry is None or now - entry.answered_at > self.max_stale:
            return NO_NAMES
        return entry.names

    def age(self, user: str, now: float) -> float | None:
        entry = self._entries.get(user)
        return None if entry is None else now - entry.answered_at

    def store(self, user: str, names: frozenset[str], now: float) -> None:
        self._entries[user] = _Entry(names, now)
        self._entries.move_to_end(user)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


# ------------------------------------------------------------------ the service (event loop)


class GroupsSubscriber(Protocol):
    """A connection whose session has the directory's groups of a user (ClientConnection)."""

    closed: bool

    def directory_groups_changed(self, names: frozenset[str]) -> None: ...


class LdapMetrics:
    def __init__(self, registry: Any = None):
        self.lookups = Counter(
            "aclgate_ldap_lookups",
            "Group lookups in the LDAP directory by outcome: found (the user and its groups), "
            "not_found (no such user: no groups), ambiguous (several entries: no groups), "
            "failed (the directory could not answer), skipped (not asked: the directory is "
            "failing and backing off, or too many lookups wait)",
            ["outcome"],
            registry=registry,
        )
        self.cache = Counter(
            "aclgate_ldap_cache",
            "Sessions' group lookups by what the cache held: fresh (used), stale (used, asked "
            "again in the background), expired (older than --ldap-max-stale) or miss (the "
            "session waited for the directory)",
            ["result"],
            registry=registry,
        )
        self.up = Gauge(
            "aclgate_ldap_up",
            "1 while the LDAP directory answers (its last lookup or probe succeeded)",
            registry=registry,
        )
        self.stale = Gauge(
            "aclgate_ldap_stale_seconds",
            "Seconds since the LDAP directory last answered, while it does not (0 while it "
            "does); past --ldap-max-stale users lose their groups from it and /readyz is 503",
            registry=registry,
        )
        self.entries = Gauge(
            "aclgate_ldap_cache_entries",
            "Users whose groups the LDAP cache holds (at most --ldap-cache-max-entries)",
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.lookups.labels(outcome)
        for freshness in Freshness:
            self.cache.labels(freshness.value)


class LdapGroups:
    """The groups of users from the directory, for the sessions of one proxy (see the module
    docstring). Runs on the event loop; the directory is asked in threads of its own."""

    def __init__(
        self,
        settings: LdapSettings,
        registry: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        directory: Any = None,
        workers: int = LDAP_WORKERS,
    ):
        self.settings = settings
        self.clock = clock
        #: has groups_of(user) -> Membership and probe(), both blocking
        self.directory = directory if directory is not None else LdapDirectory(settings)
        self.cache = MembershipCache(
            settings.cache_ttl, settings.max_stale, settings.cache_max_entries
        )
        self.metrics = LdapMetrics(registry)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aclgate-ldap")
        #: user -> callbacks waiting for the lookup under way
        self._running: dict[str, list[Callable[[], None]]] = {}
        #: user -> connections with its groups -> the names they were given last
        self._subscribers: dict[str, dict[GroupsSubscriber, frozenset[str]]] = {}
        #: None until the directory was first asked
        self.up: bool | None = None
        self.last_error: str | None = None
        self._started_at = clock()
        self._last_answer: float | None = None
        self._backoff = 0.0
        self._retry_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._probing = False
        self.metrics.up.set_function(lambda: 1 if self.up else 0)
        self.metrics.stale.set_function(self.stale_seconds)
        self.metrics.entries.set_function(lambda: len(self.cache))

    # state -------------------------------------------------------------------------

    def stale_seconds(self) -> float:
        """Seconds since the directory last answered, while it does not (0 while it does)."""
        if self.up is not False:
            return 0.0
        since = self._last_answer if self._last_answer is not None else self._started_at
        return max(0.0, self.clock() - since)

    def not_ready(self) -> str | None:
        """Why /readyz should answer 503: the directory has not answered for longer than
        --ldap-max-stale (its users' sessions have lost their groups from it), or None."""
        stale = self.stale_seconds()
        if stale > self.settings.max_stale:
            return (
                f"the LDAP directory has not answered for {stale:.0f} s (ldap_max_stale "
                f"{self.settings.max_stale:g}): its groups are not in force"
            )
        return None

    def status(self) -> dict[str, Any]:
        """For /readyz."""
        return {
            "up": self.up,
            "error": self.last_error,
            "stale_seconds": round(self.stale_seconds(), 1),
            "cache_entries": len(self.cache),
            "users_with_connections": len(self._subscribers),
            "not_ready": self.not_ready(),
        }

    # lifecycle ---------------------------------------------------------------------

    async def start(self) -> asyncio.Task[None]:
        """Probe the directory (a failure is logged, not fatal: sessions then wait for it
        and fail closed), then keep the users of open connections fresh."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self.directory.probe)
        except Exception as exc:
            self._failed(exc)
            log.error(
                "LDAP directory %s not reachable at start: %s (users get no groups from it "
                "until it is)",
                ",".join(self.settings.urls),
                self.last_error,
            )
        else:
            self._answered()
            log.info("LDAP directory %s reachable", ",".join(self.settings.urls))
        self._task = loop.create_task(self._keep_fresh(), name="ldap-groups")
        return self._task

    def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # lookups -----------------------------------------------------------------------

    def look_up(
        self,
        user: str,
        done: Callable[[frozenset[str]], None],
        subscriber: GroupsSubscriber | None = None,
    ) -> None:
        """`done(names)` later on the loop (never at once, as every wait is resumed): the
        cache's answer when fresh or stale (a stale one is asked again in the background),
        else the directory's, or none when it cannot tell and the last answer is too old.
        `subscriber` is then kept in step with later answers until `forget`."""
        loop = asyncio.get_running_loop()
        freshness, _ = self.cache.get(user, self.clock())
        self.metrics.cache.labels(freshness.value).inc()
        deliver = functools.partial(self._deliver, user, done, subscriber)
        if freshness is Freshness.FRESH:
            loop.call_soon(deliver)
        elif freshness is Freshness.STALE:
            loop.call_soon(deliver)
            self._ask(user)
        else:
            self._ask(user, deliver)

    def _deliver(
        self,
        user: str,
        done: Callable[[frozenset[str]], None],
        subscriber: GroupsSubscriber | None,
    ) -> None:
        """Hand over what is known now (the cache may have changed since the lookup)."""
        names = self.cache.usable(user, self.clock())
        if subscriber is not None and not subscriber.closed:
            self._subscribers.setdefault(user, {})[subscriber] = names
        done(names)

    def forget(self, user: str, subscriber: GroupsSubscriber) -> None:
        """The connection closed: no more updates for it."""
        subscribers = self._subscribers.get(user)
        if subscribers is not None:
            subscribers.pop(subscriber, None)
            if not subscribers:
                del self._subscribers[user]

    def _ask(self, user: str, waiter: Callable[[], None] | None = None) -> None:
        """Ask the directory for `user` (once at a time per user); `waiter()` when it
        answered or failed. Not asked while the directory is failing and backing off, or
        when too many lookups wait: then the waiter gets what the cache has."""
        loop = asyncio.get_running_loop()
        running = self._running.get(user)
        if running is not None:
            if waiter is not None:
                running.append(waiter)
            return
        if self._closed or self.clock() < self._retry_at or len(self._running) >= MAX_LOOKUPS:
            self.metrics.lookups.labels("skipped").inc()
            if self.up is False:  # what its sessions may still have (none past max-stale)
                self._push(user, self.cache.usable(user, self.clock()))
            if waiter is not None:
                loop.call_soon(waiter)
            return
        self._running[user] = [waiter] if waiter is not None else []
        future = self._executor.submit(self.directory.groups_of, user)
        future.add_done_callback(functools.partial(self._back, loop, user))

    def _back(self, loop: asyncio.AbstractEventLoop, user: str, future: Future[Any]) -> None:
        """In the worker thread: hand the answer to the event loop."""
        try:
            loop.call_soon_threadsafe(self._finished, user, future)
        except RuntimeError:  # the loop is closed: shutting down
            pass

    def _finished(self, user: str, future: Future[Any]) -> None:
        waiters = self._running.pop(user, [])
        now = self.clock()
        try:
            if future.cancelled():
                raise DirectoryError("shutting down")
            membership = future.result()
        except Exception as exc:
            self.metrics.lookups.labels("failed").inc()
            self._failed(exc)
            # what its sessions may still have: none past max-stale, nor once the cache
            # dropped the user (its age is then unknown)
            self._push(user, self.cache.usable(user, now))
        else:
            self.metrics.lookups.labels(membership.outcome).inc()
            self._answered()
            self.cache.store(user, membership.names, now)
            self._push(user, membership.names)
        for waiter in waiters:
            waiter()

    def _answered(self) -> None:
        if self.up is False:
            log.warning("LDAP directory answers again")
        self.up = True
        self.last_error = None
        self._last_answer = self.clock()
        self._backoff = 0.0
        self._retry_at = 0.0

    def _failed(self, exc: BaseException) -> None:
        why = _describe(exc)
        if self.up is not False:
            log.warning(
                "LDAP directory not answering: %s (last known groups used until %g s old)",
                why,
                self.settings.max_stale,
            )
        self.up = False
        self.last_error = why
        self._backoff = min(BACKOFF_MAX, max(BACKOFF_FIRST, self._backoff * 2))
        self._retry_at = self.clock() + self._backoff

    def _push(self, user: str, names: frozenset[str]) -> None:
        """Keep the user's open sessions in step with `names`."""
        subscribers = self._subscribers.get(user)
        if not subscribers:
            return
        for subscriber, given in list(subscribers.items()):
            if given != names and not subscriber.closed:
                subscribers[subscriber] = names
                subscriber.directory_groups_changed(names)

    # the background pass -------------------------------------------------------------

    @property
    def tick(self) -> float:
        settings = self.settings
        return max(0.05, min(1.0, settings.cache_ttl / 4, settings.max_stale / 4))

    async def _keep_fresh(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            try:
                self.refresh_pass()
            except Exception:  # a bug of ours: the pass must go on, the sessions fail closed
                log.exception("LDAP refresh pass failed")

    def refresh_pass(self) -> None:
        """Ask again for the users of open connections whose answer is older than the TTL;
        take their groups away once it is older than max-stale; probe a failing directory
        that no lookup is asking."""
        now = self.clock()
        for user in list(self._subscribers):
            age = self.cache.age(user, now)
            if age is not None and age > self.settings.max_stale:
                self._push(user, NO_NAMES)
            if age is None or age >= self.settings.cache_ttl:
                self._ask(user)  # a user the cache dropped too: a failure then takes all
        if (
            self.up is False
            and not (self._running or self._probing or self._closed)
            and now >= self._retry_at
        ):
            self._probe()

    def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        self._probing = True
        future = self._executor.submit(self.directory.probe)

        def finished() -> None:
            self._probing = False
            exc = DirectoryError("shutting down") if future.cancelled() else future.exception()
            if exc is None:
                self._answered()
            else:
                self._failed(exc)

        def back(_: Future[Any]) -> None:
            try:
                loop.call_soon_threadsafe(finished)
            except RuntimeError:  # the loop is closed: shutting down
                pass

        future.add_done_callback(back)
