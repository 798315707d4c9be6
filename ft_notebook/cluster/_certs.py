"""TLS certificates made for one cluster, kept in its private folder.

Each cluster gets its own certificate authority. The CA signs one key pair that the
scheduler, the workers and the user's clients all present; Dask's TLS requires a
certificate on both sides of every connection, so a process without this cluster's
key (another local user, another cluster) is refused during the handshake. The CA's
private key is thrown away once it has signed: nobody, not even the owner, can mint
another certificate the cluster would accept.

Keys are made with the ``cryptography`` package when it is installed and with the
``openssl`` command otherwise. Files are written 0600 inside a 0700 folder.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ft_notebook.exceptions import ClusterError

#: A cluster outliving its certificate would refuse new connections; a year is
#: far longer than any idle timeout keeps a cluster.
VALID_DAYS = 365


@dataclass(frozen=True)
class CertPaths:
    """Where a cluster's CA certificate and its shared key pair live."""

    ca: Path
    cert: Path
    key: Path

    def as_dict(self) -> dict[str, str]:
        return {"ca": str(self.ca), "cert": str(self.cert), "key": str(self.key)}

    def exist(self) -> bool:
        return self.ca.is_file() and self.cert.is_file() and self.key.is_file()


def make_certificates(folder: Path, hosts: list[str], common_name: str) -> CertPaths:
    """Make a fresh CA and a key pair it signed for ``hosts`` (IPs or DNS names)."""
    paths = CertPaths(ca=folder / "ca.pem", cert=folder / "cert.pem", key=folder / "key.pem")
    try:
        import cryptography  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        _with_openssl(paths, hosts, common_name)
    else:
        _with_cryptography(paths, hosts, common_name)
    for path in (paths.ca, paths.cert, paths.key):
        os.chmod(path, 0o600)
    return paths


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _with_cryptography(paths: CertPaths, hosts: list[str], common_name: str) -> None:
    from cryptography import x509  # type: ignore[import-not-found,unused-ignore]
    from cryptography.hazmat.primitives import hashes, serialization  # type: ignore[import-not-found,unused-ignore]
    from cryptography.hazmat.primitives.asymmetric import ec  # type: ignore[import-not-found,unused-ignore]
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # type: ignore[import-not-found,unused-ignore]

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name} CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write_private(paths.ca, ca_cert.public_bytes(pem))
    _write_private(paths.cert, cert.public_bytes(pem))
    _write_private(
        paths.key,
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def _with_openssl(paths: CertPaths, hosts: list[str], common_name: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ClusterError(
            "Cannot make TLS certificates for the cluster: neither the Python package "
            "'cryptography' nor the 'openssl' command is installed. Install one "
            "(pip install cryptography) and try again."
        )
    sans = []
    for host in hosts:
        try:
            sans.append(f"IP:{ipaddress.ip_address(host)}")
        except ValueError:
            sans.append(f"DNS:{host}")
    days = str(VALID_DAYS)
    # The CA key lives only in this temporary folder and dies with it.
    with tempfile.TemporaryDirectory(dir=paths.ca.parent) as tmp:
        ca_key, csr, ext = Path(tmp, "ca.key"), Path(tmp, "req.csr"), Path(tmp, "ext.cnf")
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            f"subjectAltName={','.join(sans)}\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        steps = [
            [openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", paths.ca,
             "-days", days, "-subj", f"/CN={common_name} CA",
             "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0"],
            [openssl, "req", "-new", *ec, "-keyout", paths.key, "-out", csr,
             "-subj", f"/CN={common_name}"],
            [openssl, "x509", "-req", "-in", csr, "-CA", paths.ca, "-CAkey", ca_key,
             "-CAserial", Path(tmp, "ca.srl"), "-CAcreateserial", "-out", paths.cert,
             "-days", days, "-extfile", ext],
        ]  # fmt: skip
        old_umask = os.umask(0o077)
        try:
            for step in steps:
                done = subprocess.run(
                    [str(a) for a in step], capture_output=True, text=True, check=False
                )
                if done.returncode != 0:
                    raise ClusterError(
                        f"Making the cluster's TLS certificate failed: `openssl "
                        f"{step[1]}` exited with {done.returncode}: "
                        f"{done.stderr.strip()[-400:]}. Install the Python package "
                        f"'cryptography' to make certificates without openssl."
                    )
        finally:
            os.umask(old_umask)
