"""TLS for listeners and outbound connections: SSL contexts from PEM material, and
the principal of a client certificate.

Owns: `server_ssl_context` (a listener's context from its `SslConfig`),
`client_ssl_context` (what a client or a node's peer connection uses), and
`certificate_principal_name` (the subject DN of a peer certificate in RFC 2253
order, as Kafka's default `ssl.principal.mapping.rules=DEFAULT` prints it:
`CN=alice,OU=ops,O=example`).

Rules kept here:
- TLS 1.2 is the lowest version offered (Kafka's `ssl.enabled.protocols` default
  is TLSv1.2,TLSv1.3).
- PEM given inline (Kafka's `ssl.keystore.key` / `ssl.keystore.certificate.chain`
  hold the PEM text) goes through a private temporary file that exists only while
  `load_cert_chain` reads it: the `ssl` module reads key material from files only.
- Key passwords are passed to `ssl`, never logged or put into exception messages.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from contextlib import contextmanager

from server.config import SslConfig

# Kafka prints the subject with Java's X500Principal.getName() (RFC 2253): these
# attributes by keyword, the RDNs from the most specific (CN) to the least.
_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# Other attributes carry their OID in RFC 2253; the few the ssl module names.
_OIDS = {
    "emailAddress": "1.2.840.113549.1.9.1",
    "serialNumber": "2.5.4.5",
    "surname": "2.5.4.4",
    "givenName": "2.5.4.42",
    "title": "2.5.4.12",
    "pseudonym": "2.5.4.65",
    "generationQualifier": "2.5.4.44",
    "initials": "2.5.4.43",
    "dnQualifier": "2.5.4.46",
    "businessCategory": "2.5.4.15",
    "postalCode": "2.5.4.17",
}


class TlsConfigError(ValueError):
    """The TLS material cannot be loaded; the message names the file, never a secret."""


def _escape_rfc2253(value: str) -> str:
    out = []
    for index, char in enumerate(value):
        if char in ',+"\\<>;' or (index == 0 and char in "# ") or (index == len(value) - 1 and char == " "):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def certificate_principal_name(peer_cert: dict) -> str | None:
    """The subject DN of `SSLObject.getpeercert()` in RFC 2253 order, or None if the
    certificate has no subject (the principal is then User:ANONYMOUS)."""
    subject = peer_cert.get("subject") if peer_cert else None
    if not subject:
        return None
    rdns = []
    for rdn in reversed(subject):
        parts = []
        for name, value in rdn:
            keyword = _RFC2253_KEYWORDS.get(name) or _OIDS.get(name) or name
            parts.append(f"{keyword}={_escape_rfc2253(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


@contextmanager
def _pem_file(value: str):
    """A path for `value`: the value itself when it is a path, else a private temporary
    file holding the inline PEM text (removed on exit)."""
    if "-----BEGIN" not in value:
        yield value
        return
    fd, path = tempfile.mkstemp(prefix="kraftwerk-pem-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
        yield path
    finally:
        os.unlink(path)


def _load_keystore(context: ssl.SSLContext, config: SslConfig) -> None:
    try:
        if config.keystore_location:
            context.load_cert_chain(config.keystore_location, password=config.key_password)
        elif config.keystore_certificate_chain:
            if not config.keystore_key:
                raise TlsConfigError("ssl.keystore.certificate.chain needs ssl.keystore.key")
            with _pem_file(config.keystore_certificate_chain) as chain, _pem_file(config.keystore_key) as key:
                context.load_cert_chain(chain, key, password=config.key_password)
    except (OSError, ssl.SSLError) as exc:
        where = config.keystore_location or "ssl.keystore.certificate.chain/ssl.keystore.key"
        # exc may be "bad decrypt" etc.; it never contains the password.
        raise TlsConfigError(f"cannot load the keystore {where}: {exc.__class__.__name__}: "
                             f"{getattr(exc, 'strerror', None) or getattr(exc, 'reason', None) or exc}") from None


def _load_truststore(context: ssl.SSLContext, config: SslConfig) -> None:
    try:
        if config.truststore_location:
            context.load_verify_locations(cafile=config.truststore_location)
        if config.truststore_certificates:
            context.load_verify_locations(cadata=config.truststore_certificates)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the truststore {config.truststore_location or '(inline)'}: {exc}") from None


def server_ssl_context(config: SslConfig) -> ssl.SSLContext:
    """The context of a TLS listener: its key and certificate, and, when client
    certificates are requested or required, the CAs that may have issued them."""
    if not config.has_keystore:
        raise TlsConfigError("a TLS listener needs ssl.keystore.location (PEM with key and certificate chain)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_keystore(context, config)
    if config.client_auth in ("requested", "required"):
        if not config.has_truststore:
            raise TlsConfigError(f"ssl.client.auth={config.client_auth} needs ssl.truststore.location")
        _load_truststore(context, config)
        context.verify_mode = ssl.CERT_REQUIRED if config.client_auth == "required" else ssl.CERT_OPTIONAL
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def client_ssl_context(cafile: str | None, certfile: str | None = None, keyfile: str | None = None,
                       password: str | None = None, check_hostname: bool = True,
                       cadata: str | None = None) -> ssl.SSLContext:
    """A client context that verifies the server against `cafile` (the system CAs when
    none is given), checks its host name unless told not to, and presents a client
    certificate when `certfile` is given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if cafile or cadata:
            context.load_verify_locations(cafile=cafile, cadata=cadata)
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the truststore {cafile or '(inline)'}: {exc}") from None
    if certfile:
        _load_keystore(context, SslConfig(keystore_location=certfile, key_password=password) if not keyfile
                       else SslConfig(keystore_certificate_chain=certfile, keystore_key=keyfile, key_password=password))
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    return context
