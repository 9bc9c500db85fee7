"""HTTPS on the router's own port (``server.tls``, ``llmroute serve --ssl-certfile FILE
--ssl-keyfile FILE``), for teams without a TLS proxy in front: uvicorn's TLS, with the
files checked first.

``check_tls`` loads the certificate chain and key once, as uvicorn will, and turns every
way that can fail into one line (ConfigError, exit 2 from the CLI) before any engine
starts: a file that is missing or unreadable, a certificate or CA file with no PEM
certificate, a key that is not a PEM private key, is encrypted (there is nobody to type a
passphrase), or does not match the certificate. ``uvicorn_tls`` is what ``uvicorn.Config``
then gets: the files, client certificates required when ``ca`` is set, and the
``Strict-Transport-Security`` header (``hsts_max_age_s``) among uvicorn's default headers,
so it costs the request path nothing.
"""

from __future__ import annotations

import ssl
from typing import Any

from llmroute.config.server import TlsConfig
from llmroute.errors import ConfigError


def check_tls(tls: TlsConfig) -> ssl.SSLContext:
    """The server context ``tls`` describes (TLS 1.2+). Raises ConfigError, one line naming
    the file and what is wrong with it (module docstring)."""
    files = [("certificate", tls.cert), ("private key", tls.key)]
    for what, path in files + ([("CA", tls.ca)] if tls.ca else []):
        _readable(what, path)
    _parse_certs(tls.cert, "certificate")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    asked: list[bool] = []

    def no_password() -> bytes:
        asked.append(True)
        return b""

    try:
        ctx.load_cert_chain(tls.cert, tls.key, no_password)
    except ssl.SSLError as exc:
        raise ConfigError(_key_problem(tls, exc, bool(asked))) from exc
    if tls.ca:
        _parse_certs(tls.ca, "CA", ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def uvicorn_tls(tls: TlsConfig | None) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments serving ``tls`` (empty for None: plain HTTP)."""
    if tls is None:
        return {}
    headers = [] if tls.hsts_max_age_s is None else [
        ("strict-transport-security", f"max-age={tls.hsts_max_age_s}")]
    return {"ssl_certfile": tls.cert, "ssl_keyfile": tls.key, "ssl_ca_certs": tls.ca,
            "ssl_cert_reqs": ssl.CERT_REQUIRED if tls.ca else ssl.CERT_NONE,
            "headers": headers}


def _readable(what: str, path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except FileNotFoundError as exc:
        raise ConfigError(f"tls: the {what} file {path} does not exist") from exc
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise ConfigError(f"tls: cannot read the {what} file {path}: {reason}") from exc


def _parse_certs(path: str, what: str, ctx: ssl.SSLContext | None = None) -> None:
    try:
        (ctx or ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)).load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        raise ConfigError(f"tls: the {what} file {path} holds no PEM certificate "
                          f"({exc.reason or exc})") from exc


def _key_problem(tls: TlsConfig, exc: ssl.SSLError, asked_password: bool) -> str:
    if exc.reason == "KEY_VALUES_MISMATCH":
        return f"tls: the private key {tls.key} does not match the certificate {tls.cert}"
    if asked_password:
        return (f"tls: the private key {tls.key} is encrypted; give an unencrypted key "
                "(e.g. `openssl pkey -in KEY -out KEY.plain`)")
    return f"tls: the private key file {tls.key} holds no PEM private key"
