"""Certificates made per cluster: a CA that signs one key pair, both sides verified."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import ssl
import sys
import threading
from pathlib import Path

import pytest

from ft_notebook.cluster import _certs
from ft_notebook.cluster._certs import CertPaths, make_certificates
from ft_notebook.exceptions import ClusterError

HAVE_CRYPTOGRAPHY = importlib.util.find_spec("cryptography") is not None
HAVE_OPENSSL = shutil.which("openssl") is not None


def _handshake(server: CertPaths, client: CertPaths | None, client_ca: Path) -> str:
    """TLS with mutual authentication over a socket pair; returns "ok" or the error."""
    srv_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(server.ca))
    srv_ctx.load_cert_chain(str(server.cert), str(server.key))
    srv_ctx.verify_mode = ssl.CERT_REQUIRED
    cli_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(client_ca))
    cli_ctx.check_hostname = False
    if client is not None:
        cli_ctx.load_cert_chain(str(client.cert), str(client.key))
    a, b = socket.socketpair()
    outcome: dict[str, str] = {}

    def serve() -> None:
        try:
            with srv_ctx.wrap_socket(a, server_side=True) as s:
                s.sendall(b"x")
                outcome["server"] = "ok"
        except (ssl.SSLError, OSError) as e:
            outcome["server"] = f"refused: {e}"

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with cli_ctx.wrap_socket(b, server_hostname="127.0.0.1") as c:
            data = c.recv(1)
            outcome["client"] = "ok" if data == b"x" else "no data"
    except (ssl.SSLError, OSError) as e:
        outcome["client"] = f"refused: {e}"
    thread.join(timeout=10)
    return "ok" if outcome == {"server": "ok", "client": "ok"} else str(outcome)


def _backends() -> list[object]:
    params: list[object] = []
    params.append(
        pytest.param(
            "cryptography",
            marks=pytest.mark.skipif(not HAVE_CRYPTOGRAPHY, reason="cryptography not installed"),
        )
    )
    params.append(
        pytest.param("openssl", marks=pytest.mark.skipif(not HAVE_OPENSSL, reason="no openssl"))
    )
    return params


@pytest.fixture(params=_backends())
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openssl":
        monkeypatch.setitem(sys.modules, "cryptography", None)  # import fails
    return str(request.param)


def test_the_cluster_key_pair_is_accepted_both_ways(tmp_path: Path, backend: str) -> None:
    certs = make_certificates(tmp_path, ["127.0.0.1", "localhost"], "test")
    assert certs.exist()
    for path in (certs.ca, certs.cert, certs.key):
        assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    assert _handshake(certs, certs, certs.ca) == "ok"


def test_another_clusters_certificate_is_refused(tmp_path: Path, backend: str) -> None:
    ours = make_certificates(_mkdir(tmp_path / "ours"), ["127.0.0.1"], "ours")
    theirs = make_certificates(_mkdir(tmp_path / "theirs"), ["127.0.0.1"], "theirs")
    # even a client that trusts our CA is refused with a key pair we did not sign
    assert "refused" in _handshake(ours, theirs, ours.ca)
    assert "refused" in _handshake(ours, None, ours.ca)  # and with none at all
    assert "refused" in _handshake(ours, ours, theirs.ca)  # a client of another CA


def test_the_ca_key_is_not_kept(tmp_path: Path, backend: str) -> None:
    make_certificates(tmp_path, ["127.0.0.1"], "test")
    pem = "".join(p.read_text() for p in tmp_path.iterdir())
    assert pem.count("PRIVATE KEY-----") == 2  # BEGIN and END of the one shared key


def test_without_any_backend_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography", None)
    monkeypatch.setattr(_certs.shutil, "which", lambda name: None)
    with pytest.raises(ClusterError, match="pip install cryptography"):
        make_certificates(tmp_path, ["127.0.0.1"], "test")


def _mkdir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)
    return path
