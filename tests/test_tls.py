"""The Flower emulation's CA and SuperLink certificate pass strict X.509 verification, Python 3.13's default.

Python 3.13's ``ssl.create_default_context()`` sets ``VERIFY_X509_STRICT``: a certificate without key
identifiers, or a CA without key usage, is refused (``Missing Authority Key Identifier``), so the
SuperLink's health check and Flower's clients in the Debian 13 images refused the emulation's first CA.
The flag is set here explicitly, so that the test means the same on every Python.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from deploy.pki.tls import TlsFiles, ensure_tls


def _handshake(files: TlsFiles, server_name: str) -> None:
    """One TLS handshake with the SuperLink's certificate, verified strictly against the CA; raises if refused."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(files.cert, files.key)
    client_context = ssl.create_default_context(cafile=str(files.ca_cert))
    client_context.verify_flags |= ssl.VERIFY_X509_STRICT
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            connection, _ = listener.accept()
            try:
                with server_context.wrap_socket(connection, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass  # the client refused: its side raises

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        with socket.create_connection(listener.getsockname(), timeout=10) as raw:
            with client_context.wrap_socket(raw, server_hostname=server_name):
                pass
        server.join(timeout=10)


@pytest.mark.parametrize("server_name", ["superlink", "localhost", "127.0.0.1"])
def test_the_superlink_s_certificate_passes_strict_verification(tmp_path, server_name):
    files, created = ensure_tls(tmp_path / "tls")
    assert created
    _handshake(files, server_name)


def _old_style_set(folder) -> None:
    """A CA and SuperLink certificate as FLTest made them before (a basic constraint and names, nothing more)."""
    ca_key, link_key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject, key, ca, names=()):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "FLTest emulation CA")]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        return builder.sign(ca_key, hashes.SHA384()).public_bytes(serialization.Encoding.PEM)

    (folder / "ca").mkdir(parents=True)
    (folder / "superlink").mkdir()
    pem = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    (folder / "ca" / "ca.key").write_bytes(ca_key.private_bytes(*pem))
    (folder / "superlink" / "superlink.key").write_bytes(link_key.private_bytes(*pem))
    (folder / "superlink" / "ca.crt").write_bytes(certificate("FLTest emulation CA", ca_key, True))
    (folder / "superlink" / "superlink.crt").write_bytes(certificate("superlink", link_key, False, ["superlink"]))


def test_a_set_made_before_strict_verification_is_made_again(tmp_path):
    _old_style_set(tmp_path / "tls")
    files = TlsFiles(*(tmp_path / "tls" / "superlink" / name for name in ("ca.crt", "superlink.crt", "superlink.key")))
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(files, "superlink")  # what Python 3.13's clients do with it
    again, created = ensure_tls(tmp_path / "tls")
    assert created and again == files
    _handshake(files, "superlink")
    assert ensure_tls(tmp_path / "tls") == (files, False)  # a strict set stays as it is
