"""A certificate for ``python -m emulators --tls DIR``: a throwaway CA and a server certificate.

``server_certificate(DIR, hosts)`` writes ``DIR/ca.pem`` (what clients trust: ``GATEWAY_CA_BUNDLE``,
``NODE_EXTRA_CA_CERTS``, the SDK's ``http_client`` verify path), ``DIR/cert.pem`` and
``DIR/key.pem`` (the server's, key mode 0600). A CA plus a leaf, rather than one self-signed leaf,
because strict verifiers (Python 3.13's default ``VERIFY_X509_STRICT``, Node) refuse a leaf used as
its own trust anchor. Files already in ``DIR`` are reused while they load, are valid for another
day and name every host, so a gateway that trusts ``ca.pem`` keeps working across emulator
restarts.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY: Final = datetime.timedelta(days=365)
REUSE_MARGIN: Final = datetime.timedelta(days=1)


@dataclass(frozen=True)
class ServerCertificate:
    ca: Path
    cert: Path
    key: Path
    reused: bool

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _covers(path: Path, hosts: Iterable[str]) -> bool:
    """The certificate at ``path`` is valid for another day and names every host."""
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    if cert.not_valid_after_utc - REUSE_MARGIN < datetime.datetime.now(datetime.UTC):
        return False
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return all(_general_name(host) in names for host in hosts)


def _reusable(found: ServerCertificate, hosts: Iterable[str]) -> bool:
    if not (found.ca.is_file() and found.cert.is_file() and found.key.is_file()):
        return False
    try:
        found.context()
        ssl.create_default_context(cafile=str(found.ca))
        return _covers(found.cert, hosts)
    except (ssl.SSLError, ValueError, x509.ExtensionNotFound):
        return False


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(pem)


def server_certificate(directory: Path, hosts: Iterable[str]) -> ServerCertificate:
    """The CA and server certificate in ``directory`` for ``hosts``, generated unless reusable."""
    hosts = list(dict.fromkeys(hosts))
    directory.mkdir(parents=True, exist_ok=True)
    found = ServerCertificate(directory / "ca.pem", directory / "cert.pem", directory / "key.pem", True)
    if _reusable(found, hosts):
        return found
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + VALIDITY
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("switchyard emulator CA"))
        .issuer_name(_name("switchyard emulator CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    made = ServerCertificate(found.ca, found.cert, found.key, False)
    made.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    made.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, made.key)
    return made
