"""TLS parameters of a PostgreSQL URL, read one way for the pool and for LISTEN.

The same `ASR_DATABASE_URL` reaches asyncpg by two roads, which read its query differently:
- the pool: SQLAlchemy passes every query parameter to `asyncpg.connect()` as a keyword, so
  `?ssl=require` works there but `?sslmode=require` or `?sslrootcert=...` is a TypeError;
- the LISTEN connection: the URL, rendered as a DSN, is parsed by asyncpg, which knows
  `sslmode`, `sslrootcert`, ... and sends any other parameter -- `ssl` included -- to the
  server as a setting, which the server refuses: `?ssl=require` broke LISTEN for good.

So the TLS parameters are taken out of the URL here, `ssl` (asyncpg's spelling) folded into
`sslmode` (libpq's), and handed to asyncpg's own DSN parser on both roads: the LISTEN DSN
carries them in its query, and the pool passes them as a `dsn` holding nothing else, beside
the host, user and database SQLAlchemy passes as keywords (explicit keywords win over a
DSN, so only the TLS part of it counts). One parser, one meaning.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from sqlalchemy.engine import URL, make_url

# libpq's TLS parameters that asyncpg's DSN parser understands.
TLS_PARAMETERS = (
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslpassword",
    "sslnegotiation",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
)
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# asyncpg's `ssl=True` means a default context, which verifies the certificate and host.
_SSL_BOOLEANS = {"true": "verify-full", "on": "verify-full", "1": "verify-full"}
_SSL_BOOLEANS |= {"false": "disable", "off": "disable", "0": "disable"}


def split_tls(url: str | URL) -> tuple[URL, dict[str, str]]:
    """(the URL without TLS parameters, the TLS parameters in libpq's spelling).

    Raises:
        ValueError: an unknown TLS mode, a parameter given twice, or `ssl` and `sslmode`
            that disagree (a misconfiguration should stop the start, not weaken TLS).
    """
    parsed = make_url(url)
    query = dict(parsed.query)
    tls: dict[str, str] = {}
    for name in (*TLS_PARAMETERS, "ssl"):
        if name in query:
            value = query.pop(name)
            if not isinstance(value, str):
                raise ValueError(f"database URL: {name} is given more than once")
            tls[name] = value
    if "ssl" in tls:
        mode = _mode_of_ssl(tls.pop("ssl"))
        if tls.setdefault("sslmode", mode) != mode:
            raise ValueError("database URL: ssl and sslmode disagree")
    if "sslmode" in tls and tls["sslmode"] not in SSL_MODES:
        raise ValueError(f"database URL: sslmode must be one of {', '.join(SSL_MODES)}")
    return parsed.set(query=query), tls


def _mode_of_ssl(value: str) -> str:
    lowered = value.lower()
    return _SSL_BOOLEANS.get(lowered, lowered)


def pool_options(url: str | URL) -> tuple[URL, dict[str, Any]]:
    """(the engine URL, asyncpg connect arguments) for `create_async_engine`."""
    base, tls = split_tls(url)
    return base, ({"dsn": "postgresql://?" + urlencode(tls)} if tls else {})


def asyncpg_dsn(url: str | URL) -> str:
    """A DSN for `asyncpg.connect()` (the LISTEN connection), TLS parameters included."""
    base, tls = split_tls(url)
    dsn = base.set(drivername="postgresql").update_query_dict(tls)
    return dsn.render_as_string(hide_password=False)
