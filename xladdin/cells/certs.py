"""The cell service's certificate: a local certificate authority made on this machine (its key never
leaves the folder) and a server certificate it signs for localhost, 127.0.0.1 and ::1 (and any host
named). Office on Mac and on the web load an add-in only over HTTPS from a trusted certificate: trust
the authority once (``TRUST`` says how), not each server certificate.

The authority can vouch for those names only: its name constraints (critical) permit localhost,
127.0.0.1, ::1 and the hosts named, so whoever reads ``ca-key.pem`` cannot make a certificate this
machine's browsers and Office accept for any other site. It lives ``CA_DAYS`` (a year; trusted again
when it is made again), the server certificate ``SERVER_DAYS``; an authority made without the
constraints, or without a host now named, is made again.

Made with the ``cryptography`` package (``pip install 'xladdin[cells]'``)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

CA_DAYS = 398  # a year and a month: the user trusts it again when the service makes the next
SERVER_DAYS = 397  # within what every browser accepts of a TLS server certificate (Apple: 825, Chrome: 398)
TRUST = {
    "macOS": "security add-trusted-cert -r trustRoot -k ~/Library/Keychains/login.keychain-db {ca}",
    "Windows": "certutil -user -addstore Root {ca}",
    "Linux (Chromium, Firefox)": "certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n xladdin -i {ca}",
}


@dataclass(frozen=True)
class Certificate:
    ca: Path  # the authority's certificate: what a machine trusts
    cert: Path  # the server's certificate chain
    key: Path  # the server's key


def default_folder() -> Path:
    """Where the certificate is kept: ``XLADDIN_CELLS_DIR``, else beside xladdin's config."""
    if os.environ.get("XLADDIN_CELLS_DIR"):
        return Path(os.environ["XLADDIN_CELLS_DIR"])
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "xladdin" / "cells"
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "xladdin" / "cells"


def _crypto():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ConfigError("the cell service's certificate needs the cryptography package: "
                          "pip install 'xladdin[cells]'") from None
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def _write(path: Path, data: bytes, private: bool = False) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _names(hosts: tuple[str, ...]) -> list:
    x509 = _crypto()[0]
    out = []
    for h in ("localhost", "127.0.0.1", "::1", *hosts):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return list(dict.fromkeys(out))


def _subtree(name):
    """The name constraint's subtree for one name: a host's own DNS name, an address's /32 or /128."""
    x509 = _crypto()[0]
    if isinstance(name, x509.IPAddress):
        return x509.IPAddress(ipaddress.ip_network(name.value))
    return name


def _permits(ca, names: list) -> bool:
    """Whether the authority carries name constraints permitting exactly-these names at least."""
    x509 = _crypto()[0]
    try:
        constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    except x509.ExtensionNotFound:
        return False
    permitted = set(constraints.value.permitted_subtrees or ())
    return constraints.critical and {_subtree(n) for n in names} <= permitted


def ensure(folder: Path, hosts: tuple[str, ...] = ()) -> Certificate:
    """The authority and server certificate in ``folder``, made when missing, expiring within 30 days,
    or not naming every host of ``hosts``."""
    x509, hashes, serialization, ec, eku, oid = _crypto()
    folder.mkdir(parents=True, exist_ok=True)
    found = Certificate(folder / "ca.pem", folder / "cert.pem", folder / "key.pem")
    ca_key_path = folder / "ca-key.pem"
    now = datetime.datetime.now(datetime.UTC)
    soon = now + datetime.timedelta(days=30)
    names = _names(hosts)

    def load(path: Path):
        try:
            return x509.load_pem_x509_certificate(path.read_bytes())
        except (OSError, ValueError):
            return None

    ca = load(found.ca)
    try:
        ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)
    except (OSError, ValueError):
        ca_key = None
    if ca is None or ca_key is None or ca.not_valid_after_utc < soon or not _permits(ca, names):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(oid.COMMON_NAME, "xladdin local cell service CA"),
                             x509.NameAttribute(oid.ORGANIZATION_NAME, "xladdin (this machine only)")])
        ca = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
              .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .add_extension(x509.NameConstraints(permitted_subtrees=[_subtree(n) for n in names],
                                                  excluded_subtrees=None), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                           content_commitment=False, key_encipherment=False, data_encipherment=False,
                                           key_agreement=False, encipher_only=False, decipher_only=False),
                             critical=True)
              .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
        _write(ca_key_path, ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()), private=True)
        _write(found.ca, ca.public_bytes(serialization.Encoding.PEM))
        found.cert.unlink(missing_ok=True)

    cert = load(found.cert)
    fresh = cert is not None and found.key.is_file() and cert.not_valid_after_utc >= soon and cert.issuer == ca.subject
    if fresh:
        try:
            have = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
        except x509.ExtensionNotFound:
            have = set()
        fresh = set(names) <= have
    if not fresh:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(oid.COMMON_NAME, "localhost")]))
                .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([eku.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        _write(found.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()), private=True)
        _write(found.cert, cert.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM))
    return found


def trust_text(ca: Path) -> str:
    """How to trust the authority on each system (once; Office then loads the add-in from this service)."""
    return "\n".join(f"  {system}: {command.format(ca=ca)}" for system, command in TRUST.items())
