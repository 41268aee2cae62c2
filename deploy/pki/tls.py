"""A small CA and the SuperLink's TLS certificate for the Flower emulation (never overwritten).

Layout under the TLS folder: ``ca/ca.key`` (the CA's private key, stays on the host, never
mounted) and ``superlink/`` (``ca.crt``, ``superlink.crt``, ``superlink.key``: the folder the
SuperLink mounts read-only). SuperNodes and the ``flwr`` CLI get ``superlink/ca.crt`` as
their root certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from deploy.kit import KIT

DEFAULT_NAMES = ("superlink", "localhost", "127.0.0.1")
VALID_DAYS = 365


@dataclass(frozen=True)
class TlsFiles:
    """The files the SuperLink and its clients use."""

    ca_cert: Path
    cert: Path
    key: Path

    @property
    def folder(self) -> Path:
        """The folder the SuperLink mounts (certificate, key, CA certificate)."""
        return self.cert.parent


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey, owner_uid: int | None) -> None:
    """Write a PEM private key with mode 0600 (owned by ``owner_uid`` when run as root)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    if owner_uid is not None and os.geteuid() == 0:
        os.chown(path, owner_uid, owner_uid)


def _san(names: tuple[str, ...]) -> x509.SubjectAlternativeName:
    """DNS names and IP addresses as a SubjectAlternativeName extension."""
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _key_usage(ca: bool) -> x509.KeyUsage:
    """A CA signs certificates; the SuperLink's key signs its TLS handshakes (ECDSA), nothing else."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _certificate(subject: str, public_key, issuer: str, signing_key, *, ca: bool, names: tuple[str, ...] = ()):
    """A certificate valid from now for :data:`VALID_DAYS` days, with every extension strict X.509 verification
    requires (Python 3.13's default, ``ssl.VERIFY_X509_STRICT``): a critical basic constraint and key usage,
    both key identifiers."""
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(_key_usage(ca), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()), critical=False)
    )
    if not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if names:
        builder = builder.add_extension(_san(names), critical=False)
    return builder.sign(signing_key, hashes.SHA384())


def _verifies_strictly(files: TlsFiles) -> bool:
    """Whether the CA and the SuperLink's certificate carry what strict verification requires (a set made before
    FLTest added them lacks the key identifiers and the CA's key usage: Python 3.13's clients refuse it)."""
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    link = x509.load_pem_x509_certificate(files.cert.read_bytes())
    required = {
        ca: (x509.KeyUsage, x509.SubjectKeyIdentifier),
        link: (x509.KeyUsage, x509.AuthorityKeyIdentifier),
    }
    return all(
        any(isinstance(extension.value, kind) for extension in certificate.extensions)
        for certificate, kinds in required.items()
        for kind in kinds
    )


def ensure_tls(
    folder: Path, names: tuple[str, ...] = DEFAULT_NAMES, container_uid: int = KIT.uid
) -> tuple[TlsFiles, bool]:
    """Create the CA and the SuperLink certificate for ``names`` unless present; returns (files, created).

    Existing files are kept as they are (a certificate's names are not checked again), unless they lack
    what strict verification requires (a set made before FLTest added it): that set is made again.
    """
    ca_dir, link_dir = folder / "ca", folder / "superlink"
    files = TlsFiles(ca_cert=link_dir / "ca.crt", cert=link_dir / "superlink.crt", key=link_dir / "superlink.key")
    if files.ca_cert.is_file() and files.cert.is_file() and files.key.is_file() and _verifies_strictly(files):
        return files, False
    for directory in (folder, ca_dir, link_dir):
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.geteuid() == 0:  # the SuperLink (uid 10001) reads its folder through a read-only mount
        os.chown(link_dir, container_uid, container_uid)
    for leftover in (ca_dir / "ca.key", files.ca_cert, files.cert, files.key):
        leftover.unlink(missing_ok=True)  # a half-made set from an interrupted run
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_cert = _certificate("FLTest emulation CA", ca_key.public_key(), "FLTest emulation CA", ca_key, ca=True)
    link_key = ec.generate_private_key(ec.SECP384R1())
    link_cert = _certificate(names[0], link_key.public_key(), "FLTest emulation CA", ca_key, ca=False, names=names)
    _write_private(ca_dir / "ca.key", ca_key, None)
    _write_private(files.key, link_key, container_uid)
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(link_cert.public_bytes(serialization.Encoding.PEM))
    return files, True
