"""The ``server:`` section of the configuration: bind address, body limit, graceful
shutdown (``api/drain.py``), CORS and TLS (``api/tls.py``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from llmroute.config.base import Strict


class CorsConfig(Strict):
    """CORS for browser clients (Starlette's ``CORSMiddleware``; off while
    ``allow_origins`` is empty): the origins allowed (``["*"]``: any), the methods and
    request headers a preflight may ask for, whether credentials (cookies, the
    ``Authorization`` header) may be sent, the response headers a page may read, and how
    long (s) a browser may cache a preflight answer."""

    allow_origins: list[str] = []
    allow_methods: list[str] = ["GET", "POST", "DELETE", "OPTIONS"]
    allow_headers: list[str] = ["authorization", "content-type", "x-request-id",
                                "x-llmroute-strategy", "traceparent"]
    allow_credentials: bool = False
    expose_headers: list[str] = ["x-request-id", "x-llmroute-backend", "x-llmroute-pool",
                                 "x-llmroute-intent", "x-llmroute-strategy", "retry-after",
                                 "x-ratelimit-limit-requests",
                                 "x-ratelimit-remaining-requests",
                                 "x-ratelimit-reset-requests", "x-ratelimit-limit-tokens",
                                 "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
                                 "server-timing"]
    max_age_s: int = Field(600, ge=0)

    @model_validator(mode="after")
    def _no_wildcard_with_credentials(self) -> CorsConfig:
        if self.allow_credentials and "*" in self.allow_origins:
            raise ValueError("allow_credentials needs explicit allow_origins, not '*' "
                             "(browsers refuse credentials with a wildcard origin)")
        return self


class TlsConfig(Strict):
    """HTTPS on the router's own port (``api/tls.py``): the PEM certificate chain ``cert``
    and its unencrypted private key ``key`` (file paths); with ``ca`` (a PEM CA bundle)
    every client must present a certificate signed by it (mutual TLS). ``hsts_max_age_s``:
    when set, every answer carries ``Strict-Transport-Security: max-age=<it>``."""

    cert: str = Field(min_length=1)
    key: str = Field(min_length=1)
    ca: str | None = None
    hsts_max_age_s: int | None = Field(None, ge=0)


class ServerConfig(Strict):
    """HTTP server: bind address, ``max_body_bytes`` (bytes, default 4 MiB), and what a
    client may make the server hold (``api/http11.HttpProtocol`` reads these):

    * ``max_header_bytes``: the most bytes a request's line and headers may take; more gets
      a 431 (default 64 KiB: Envoy's default bound is 60 KiB, ``max_request_headers_kb``;
      nginx's is 4 buffers of 8 KiB; a 10 kB API key fits). Checked per read, so at most
      one read (256 KiB) more is buffered before the refusal;
    * ``header_timeout_s``: how long a request's line and headers may take to arrive, from
      their first byte; later gets a 408 (s; default 60, nginx's ``client_header_timeout``);
    * ``body_timeout_s``: how long a request body may go without a byte arriving while the
      server reads it; longer gets a 408 (s; default 60, nginx's ``client_body_timeout``).

    Then the graceful shutdown on SIGTERM (``api/drain.py``): ``drain_delay_s`` seconds of
    refusing new requests (503) and failing ``/ready`` while still listening, then up to
    ``drain_timeout_s`` seconds for accepted requests and streams to finish. ``tls``: serve
    HTTPS (None: plain HTTP; ``llmroute serve --ssl-certfile/--ssl-keyfile`` set it too)."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    header_timeout_s: float = Field(60.0, gt=0)
    body_timeout_s: float = Field(60.0, gt=0)
    drain_delay_s: float = Field(5.0, ge=0)
    drain_timeout_s: float = Field(30.0, ge=0)
    cors: CorsConfig = CorsConfig()
    tls: TlsConfig | None = None
