"""HTTPS on the router's own port: ``llmroute serve --ssl-certfile/--ssl-keyfile`` (or
``server.tls``) serves real TLS on loopback that httpx and the openai SDK verify against a
test CA made here with the ``openssl`` CLI; HSTS when asked; client certificates with ``ca``;
and every bad certificate or key is one line, exit 2, before any engine starts."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import ssl
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from llmroute.api.server import bind_socket
from llmroute.api.tls import check_tls
from llmroute.assemble import serve as serve_module
from llmroute.cli.main import main, with_tls
from llmroute.config import Config, parse_config
from llmroute.config.server import TlsConfig
from llmroute.errors import ConfigError
from tests.fakes.router import make_config
from tests.fakes.upstream import serve_upstream

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

CONFIG = """\
pools: {general: {}}
backends: [{id: a, pool: general, engine: openai, model: m, base_url: "http://127.0.0.1:9"}]
routing: {default_pool: general}
"""
LEAF_EXT = ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
            "extendedKeyUsage={usage}\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _leaf(d: Path, name: str, usage: str) -> None:
    (d / f"{name}.ext").write_text(LEAF_EXT.format(usage=usage))
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", "-extfile",
             f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A test CA, a server certificate for 127.0.0.1 and a client certificate it signed,
    another key, and an encrypted copy of the server key."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj",
             "/CN=llmroute test CA", cwd=d)
    _leaf(d, "server", "serverAuth")
    _leaf(d, "client", "clientAuth")
    _openssl("genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", "other.key", cwd=d)
    _openssl("pkey", "-in", "server.key", "-aes256", "-passout", "pass:secret", "-out",
             "encrypted.key", cwd=d)
    (d / "junk.pem").write_text("not a pem file\n")
    (d / "dir").mkdir()
    return d


def _trusting(pki: Path, client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if client_cert:
        ctx.load_cert_chain(pki / "client.pem", pki / "client.key")
    return ctx


def _tls(pki: Path, **extra) -> TlsConfig:
    return TlsConfig(cert=str(pki / "server.pem"), key=str(pki / "server.key"), **extra)


def _served_config(up_url: str, port: int, tls: TlsConfig) -> Config:
    return make_config([{"id": "a", "pool": "general", "base_url": up_url}],
                       gate={"kind": "off"}, server={"port": port, "drain_delay_s": 0,
                                                     "drain_timeout_s": 2,
                                                     "tls": tls.model_dump()})


async def _until_up(url: str, ctx: ssl.SSLContext, task: asyncio.Task) -> None:
    async with httpx.AsyncClient(verify=ctx, timeout=2) as client:
        for _ in range(300):
            assert not task.done(), task
            try:
                if (await client.get(url + "/health")).status_code == 200:
                    return
            except httpx.ConnectError:
                await asyncio.sleep(0.05)
    raise AssertionError("the router did not come up")


async def test_serve_speaks_verified_https_to_httpx_and_the_openai_sdk(pki):
    with bind_socket("127.0.0.1", 0) as probe:
        port = probe.getsockname()[1]
    url = f"https://127.0.0.1:{port}"
    async with serve_upstream(["ok"], "Hello over TLS.") as up:
        config = _served_config(up.base_url, port, _tls(pki, hsts_max_age_s=600))
        task = asyncio.create_task(serve_module.serve_forever(config, "127.0.0.1", port,
                                                              None, "warning"))
        try:
            await _until_up(url, _trusting(pki), task)
            async with httpx.AsyncClient(verify=_trusting(pki)) as client:
                health = await client.get(url + "/health")
            async with httpx.AsyncClient(verify=_trusting(pki)) as http:
                sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused",
                                         http_client=http, max_retries=0)
                answer = await sdk.chat.completions.create(
                    model="auto", messages=[{"role": "user", "content": "hi"}])
            async with httpx.AsyncClient() as untrusting:  # the system CAs only
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await untrusting.get(url + "/health")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the server drains and returns
            await asyncio.wait_for(task, 20)
    assert health.headers["strict-transport-security"] == "max-age=600"
    assert answer.choices[0].message.content == "Hello over TLS."
    assert len(up.requests) == 1


async def test_a_ca_makes_clients_present_a_certificate_it_signed(pki):
    from llmroute.api.server import serve_in_background
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    app = Starlette(routes=[Route("/health", lambda r: PlainTextResponse("ok"))])
    async with serve_in_background(app, tls=_tls(pki, ca=str(pki / "ca.pem"))) as url:
        async with httpx.AsyncClient(verify=_trusting(pki, client_cert=True)) as client:
            ok = await client.get(url + "/health")
        async with httpx.AsyncClient(verify=_trusting(pki)) as anonymous:
            with pytest.raises(httpx.HTTPError):
                (await anonymous.get(url + "/health")).raise_for_status()
    assert ok.text == "ok" and "strict-transport-security" not in ok.headers


@pytest.mark.parametrize("cert,key,message", [
    ("missing.pem", "server.key", "the certificate file {d}/missing.pem does not exist"),
    ("server.pem", "missing.key", "the private key file {d}/missing.key does not exist"),
    ("junk.pem", "server.key", "the certificate file {d}/junk.pem holds no PEM certificate"),
    ("server.key", "server.key", "the certificate file {d}/server.key holds no PEM "
                                 "certificate"),
    ("server.pem", "junk.pem", "the private key file {d}/junk.pem holds no PEM private key"),
    ("server.pem", "other.key", "the private key {d}/other.key does not match the "
                                "certificate {d}/server.pem"),
    ("server.pem", "encrypted.key", "the private key {d}/encrypted.key is encrypted"),
    ("server.pem", "dir", "cannot read the private key file {d}/dir: is a directory"),
], ids=["no-cert", "no-key", "junk-cert", "key-as-cert", "junk-key", "mismatched",
        "encrypted", "directory"])
def test_bad_certificates_and_keys_are_one_line(pki, cert, key, message):
    with pytest.raises(ConfigError) as err:
        check_tls(TlsConfig(cert=str(pki / cert), key=str(pki / key)))
    assert err.value.message.startswith("tls: " + message.format(d=pki))
    assert "\n" not in err.value.message


def test_a_ca_file_without_certificates_is_refused(pki):
    with pytest.raises(ConfigError, match="the CA file .*junk.pem holds no PEM certificate"):
        check_tls(_tls(pki, ca=str(pki / "junk.pem")))


def test_serve_with_a_mismatched_key_exits_2_before_any_engine_starts(pki, tmp_path,
                                                                      monkeypatch, capsys):
    def spy(*args, **kwargs):
        raise AssertionError("the runtime must not open")

    monkeypatch.setattr(serve_module, "open_runtime", spy)
    config = tmp_path / "router.yaml"
    config.write_text(CONFIG)
    code = main(["serve", "--config", str(config), "--port", "0", "--log-level", "error",
                 "--ssl-certfile", str(pki / "server.pem"),
                 "--ssl-keyfile", str(pki / "other.key")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("llmroute: tls: the private key") and "does not match" in err


def test_the_command_line_files_go_together_and_override_the_config(pki, capsys):
    config = parse_config(CONFIG, "t")
    assert main(["serve", "--tls-cert", str(pki / "server.pem")]) == 2
    assert "--ssl-certfile and --ssl-keyfile go together" in capsys.readouterr().err
    assert with_tls(config, None, None) is config
    both = with_tls(config, str(pki / "server.pem"), str(pki / "server.key")).server.tls
    assert both == _tls(pki)
    configured = config.model_copy(update={"server": config.server.model_copy(update={
        "tls": _tls(pki, hsts_max_age_s=60)})})
    swapped = with_tls(configured, None, str(pki / "other.key")).server.tls
    assert swapped == TlsConfig(cert=str(pki / "server.pem"), key=str(pki / "other.key"),
                                hsts_max_age_s=60)


def test_workers_get_the_files_on_their_command_line(pki):
    from llmroute.assemble.workers import worker_argv

    argv = worker_argv(None, "127.0.0.1", 8443, "info", _tls(pki))
    assert argv[-4:] == ["--ssl-certfile", str(pki / "server.pem"), "--ssl-keyfile",
                         str(pki / "server.key")]
    assert "--ssl-certfile" not in worker_argv(None, "127.0.0.1", 8443, "info")
