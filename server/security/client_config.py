"""How a client side connects: security protocol, TLS material and SASL credentials.

Owns: `ClientSecurity`, built either from Kafka client properties
(`ClientSecurity.from_properties`, what `--command-config FILE` holds) or from a
node's own configuration for its connections to the controllers
(`ClientSecurity.for_node`).

Rules kept here:
- The password never appears in a repr, a str or an error message.
- Kafka's property names and meanings: `security.protocol`,
  `ssl.truststore.location` (PEM CA bundle), `ssl.keystore.location` (PEM with the
  client's key and certificate chain), `ssl.key.password`,
  `ssl.endpoint.identification.algorithm` ("https" checks the host name, "" does
  not), `sasl.mechanism`, `sasl.jaas.config` (`username="..." password="..."`).
- A node talks to the controllers with the security protocol of the first
  `controller.listener.names` entry (from `listener.security.protocol.map`), its own
  keystore and truststore, `sasl.mechanism.controller.protocol`, and the JAAS line
  of `listener.name.<controller listener>.<mechanism>.sasl.jaas.config` or
  `sasl.jaas.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from server.config import SASL_PROTOCOLS, SECURITY_PROTOCOL_IDS, TLS_PROTOCOLS, ServerConfig, SslConfig
from server.security.jaas import JaasError, parse_jaas_config
from server.security.tls import client_ssl_context


class ClientSecurityError(ValueError):
    """The client properties are incomplete or malformed (the message holds no secret)."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOL_IDS:
            raise ClientSecurityError(f"security.protocol={self.security_protocol!r} is not one of "
                                      f"{', '.join(SECURITY_PROTOCOL_IDS)}")
        if self.uses_sasl and (not self.sasl_mechanism or self.sasl_username is None or self.sasl_password is None):
            raise ClientSecurityError(f"security.protocol={self.security_protocol} needs sasl.mechanism and "
                                      "sasl.jaas.config with username and password")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in SASL_PROTOCOLS

    def ssl_context(self):
        """The client SSLContext (None for PLAINTEXT / SASL_PLAINTEXT)."""
        if not self.uses_tls:
            return None
        return client_ssl_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile, self.ssl_key_password,
                                  self.ssl_check_hostname)

    # -- builders --------------------------------------------------------------
    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "ClientSecurity":
        """Kafka client properties (a `--command-config` file) into a ClientSecurity."""
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper() or "PLAINTEXT"
        for key in ("ssl.keystore.type", "ssl.truststore.type"):
            if props.get(key, "PEM").strip().upper() != "PEM":
                raise ClientSecurityError(f"{key}={props[key]!r}: kraftwerk reads PEM only")
        mechanism = props.get("sasl.mechanism", "GSSAPI" if protocol in SASL_PROTOCOLS else "").strip().upper()
        username = password = None
        jaas = props.get("sasl.jaas.config", "").strip()
        if jaas:
            username, password = _jaas_credentials(jaas)
        return cls(
            security_protocol=protocol,
            ssl_cafile=props.get("ssl.truststore.location") or None,
            ssl_certfile=props.get("ssl.keystore.location") or None,
            ssl_key_password=props.get("ssl.key.password") or None,
            ssl_check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip().lower() == "https",
            sasl_mechanism=mechanism or None,
            sasl_username=username,
            sasl_password=password,
        )

    @classmethod
    def for_node(cls, config: ServerConfig) -> "ClientSecurity":
        """What a node uses on its own connections to the controllers."""
        if config.controller_listener_names:
            listener_name = config.controller_listener_names[0]
            protocol = config.security_protocol_for(listener_name)
        else:
            # No controller.listener.names (kraftwerk's single-listener configs): the
            # controllers speak what this node's first listener speaks.
            listener_name = config.listener.name
            protocol = config.listener.security_protocol
        ssl: SslConfig = config.ssl_for(listener_name)
        mechanism = username = password = None
        if protocol in SASL_PROTOCOLS:
            mechanism = config.sasl_mechanism_controller_protocol
            key = f"listener.name.{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config"
            jaas = config.extra.get(key) or config.extra.get("sasl.jaas.config")
            if not jaas:
                raise ClientSecurityError(f"the controller listener {listener_name} is {protocol}: set {key} "
                                          "(or sasl.jaas.config) with username and password")
            username, password = _jaas_credentials(jaas)
        certfile = keyfile = None
        if ssl.keystore_location:
            certfile = ssl.keystore_location
        elif ssl.keystore_certificate_chain:
            certfile, keyfile = ssl.keystore_certificate_chain, ssl.keystore_key
        return cls(
            security_protocol=protocol,
            ssl_cafile=ssl.truststore_location,
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
            ssl_key_password=ssl.key_password,
            ssl_check_hostname=ssl.endpoint_identification_algorithm == "https",
            sasl_mechanism=mechanism,
            sasl_username=username,
            sasl_password=password,
        )


def _jaas_credentials(text: str) -> tuple[str | None, str | None]:
    """username and password of a client JAAS line (PlainLoginModule, ScramLoginModule)."""
    try:
        jaas = parse_jaas_config(text)
    except JaasError as exc:
        raise ClientSecurityError(f"sasl.jaas.config: {exc}") from None
    return jaas.options.get("username"), jaas.options.get("password")
