"""The ACL authorizer: Kafka's StandardAuthorizer semantics over the replayed ACLs.

Owns: `AuthorizerConfig` (from `authorizer.class.name`, `super.users`,
`allow.everyone.if.no.acl.found`), `StandardAuthorizer` (an index of the image's ACLs
and the decision for one (principal, host, operation, resource)), `check_request`
(the per-API gate the dispatcher calls, with the API's rule from its catalog entry,
server/api/catalog.py) and `build_authorizer`.

Semantics (Kafka's StandardAuthorizer, carried over as facts):
- a super user (`super.users`, "User:admin;User:broker") may do everything;
- the ACLs that apply to a resource are the LITERAL ones with its name, the LITERAL
  wildcard "*" of its type and every PREFIXED one whose name is a prefix of its name;
- of those, an ACL applies to a request when its principal is the request's (or
  "User:*" for a User principal), and its host the client's or "*";
- a DENY that applies for the operation (or ALL) wins; otherwise an ALLOW for the
  operation, ALL, or an operation implying it (READ, WRITE, DELETE, ALTER imply
  DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
- with no ACL at all on the resource (for anyone), `allow.everyone.if.no.acl.found`
  decides (default false); with ACLs on it but none that allows, denied.

Rules kept here:
- The ACLs are read from the committed image (`state.acls()`), never kept apart: the
  index is rebuilt when that set changes: the state stamps the offset of the last ACL
  record it applied (`acls_changed_offset`, moved back with the ACLs by an aborted
  transaction), so the same state object at the same stamp means the same set, an O(1)
  check per request; a new state object (a loaded snapshot) rebuilds.
- Cost per decision is O(ACLs that name the resource for this principal or "User:*"
  + distinct prefix lengths of its type), not O(all ACLs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from server.authorization import AclOperation
from server.observability import Event, get_logger
from server.security import api_rules
from server.security.model import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclEntry,
    AclPermissionType,
    PatternType,
    ResourceType,
)

log = get_logger("security")

_ALL_BITS = (1 << 32) - 1
# What an ALLOW for an operation also allows (Kafka's implied operations).
_IMPLIES: dict[int, tuple[int, ...]] = {
    AclOperation.READ: (AclOperation.DESCRIBE,),
    AclOperation.WRITE: (AclOperation.DESCRIBE,),
    AclOperation.DELETE: (AclOperation.DESCRIBE,),
    AclOperation.ALTER: (AclOperation.DESCRIBE,),
    AclOperation.ALTER_CONFIGS: (AclOperation.DESCRIBE_CONFIGS,),
}

# The operations Kafka reports in "authorized operations" per resource type.
TOPIC_OPERATIONS = (
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE,
    AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
)


def allow_mask(operation: int) -> int:
    """The operations (as bits) an ALLOW ACL for `operation` allows."""
    if operation == AclOperation.ALL:
        return _ALL_BITS
    bits = 1 << operation
    for implied in _IMPLIES.get(operation, ()):
        bits |= 1 << implied
    return bits


def deny_mask(operation: int) -> int:
    """The operations a DENY ACL for `operation` denies (no implication for DENY)."""
    return _ALL_BITS if operation == AclOperation.ALL else 1 << operation


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def authorizer_config(extra: Mapping[str, str]) -> AuthorizerConfig | None:
    """None when `authorizer.class.name` is unset or empty (no authorizer, as in Kafka)."""
    if not (extra.get("authorizer.class.name") or "").strip():
        return None
    supers = frozenset(part.strip() for part in (extra.get("super.users") or "").split(";") if part.strip())
    allow = (extra.get("allow.everyone.if.no.acl.found") or "false").strip().lower() == "true"
    return AuthorizerConfig(supers, allow)


class _Rules:
    """The ACLs of one resource pattern, by principal, as (allow bits, deny bits, host) triples."""

    __slots__ = ("by_principal",)

    def __init__(self) -> None:
        self.by_principal: dict[str, list[tuple[int, int, str]]] = {}

    def add(self, entry: AclEntry) -> None:
        if entry.permission_type == AclPermissionType.ALLOW:
            rule = (allow_mask(entry.operation), 0, entry.host)
        else:
            rule = (0, deny_mask(entry.operation), entry.host)
        self.by_principal.setdefault(entry.principal, []).append(rule)


class AclIndex:
    """ACLs indexed for decisions, per resource type: literal name -> rules, prefix ->
    rules, and the distinct prefix lengths to probe (ascending)."""

    __slots__ = ("literal", "prefixed", "prefix_lengths", "size")

    def __init__(self, acls: Mapping[Any, AclEntry]) -> None:
        self.literal: dict[int, dict[str, _Rules]] = {}
        self.prefixed: dict[int, dict[str, _Rules]] = {}
        for entry in acls.values():
            table = self.prefixed if entry.pattern_type == PatternType.PREFIXED else self.literal
            by_name = table.get(entry.resource_type)
            if by_name is None:
                by_name = table[entry.resource_type] = {}
            rules = by_name.get(entry.resource_name)
            if rules is None:
                rules = by_name[entry.resource_name] = _Rules()
            rules.add(entry)
        self.prefix_lengths: dict[int, tuple[int, ...]] = {
            resource_type: tuple(sorted({len(name) for name in by_name}))
            for resource_type, by_name in self.prefixed.items()}
        self.size = len(acls)

    def matching(self, resource_type: int, name: str) -> list[_Rules]:
        """Every pattern's rules that apply to the resource (any principal)."""
        found = []
        literal = self.literal.get(resource_type)
        if literal is not None:
            rules = literal.get(name)
            if rules is not None:
                found.append(rules)
            if name != WILDCARD:
                rules = literal.get(WILDCARD)
                if rules is not None:
                    found.append(rules)
        prefixed = self.prefixed.get(resource_type)
        if prefixed is not None:
            size = len(name)
            for length in self.prefix_lengths[resource_type]:
                if length > size:
                    break
                rules = prefixed.get(name[:length])
                if rules is not None:
                    found.append(rules)
        return found


class StandardAuthorizer:
    """Decisions over the committed image's ACLs (see the module docstring)."""

    def __init__(self, config: AuthorizerConfig, state_getter: Callable[[], Any]) -> None:
        self.config = config
        self._state_getter = state_getter
        self._index = AclIndex({})
        self._indexed_stamp = -2
        self._indexed_state: Any = None
        self.rebuilds = 0  # for tests and the benchmark: how often the index was rebuilt

    # -- the index ----------------------------------------------------------------
    def index(self) -> AclIndex:
        state = self._state_getter()
        if state is None:
            return self._index
        stamp = state.acls_changed_offset
        if stamp != self._indexed_stamp or state is not self._indexed_state:
            # One state's history fixes its ACL set at each stamp (ControllerState), so
            # the same state at the same stamp means the same set: O(1) per request.
            self._index = AclIndex(dict(state.acls()))
            self._indexed_stamp = stamp
            self._indexed_state = state
            self.rebuilds += 1
        return self._index

    # -- decisions ------------------------------------------------------------------
    def is_super_user(self, principal) -> bool:
        return str(principal) in self.config.super_users

    def allowed(self, principal, host: str, operation: int, resource_type: int, name: str) -> bool:
        """The decision alone, without logging."""
        principal_text = str(principal)
        if principal_text in self.config.super_users:
            return True
        return self._decide(self.index(), _who(principal_text), host, 1 << operation, resource_type, name)

    def allowed_names(self, principal, host: str, operation: int, resource_type: int, names) -> list[str]:
        """The names of `names` the principal may `operation` (no logging): one index and
        principal lookup for many resources (Metadata's topic listing)."""
        principal_text = str(principal)
        if principal_text in self.config.super_users:
            return list(names)
        index, who, bit, decide = self.index(), _who(principal_text), 1 << operation, self._decide
        return [name for name in names if decide(index, who, host, bit, resource_type, name)]

    def _decide(self, index: AclIndex, who_matches: tuple[str, ...], host: str, bit: int, resource_type: int,
                name: str) -> bool:
        found = index.matching(resource_type, name)
        if not found:
            return self.config.allow_everyone_if_no_acl_found
        allow = False
        for rules in found:
            for who in who_matches:
                entries = rules.by_principal.get(who)
                if entries is None:
                    continue
                for allow_bits, deny_bits, acl_host in entries:
                    if acl_host != host and acl_host != WILDCARD:
                        continue
                    if deny_bits & bit:
                        return False
                    if allow_bits & bit:
                        allow = True
        return allow

    def authorize(self, principal, host: str, operation: int, resource_type: int, name: str,
                  api: str | None = None) -> bool:
        """The decision; a refusal is logged (security.authorization_failed)."""
        if self.allowed(principal, host, operation, resource_type, name):
            return True
        log.info(Event.AUTHORIZATION_FAILED, principal=str(principal), host=host,
                 operation=_name(AclOperation, operation), resource_type=_name(ResourceType, resource_type),
                 resource_name=name, api=api)
        return False

    def authorize_cluster(self, ctx, operation: int, api: str | None = None) -> bool:
        return self.authorize(ctx.principal, ctx.client_host, operation, ResourceType.CLUSTER,
                              CLUSTER_RESOURCE_NAME, api)

    def authorized_operations(self, principal, host: str, resource_type: int, name: str,
                              operations) -> int:
        """Kafka's "authorized operations" bitfield for one resource."""
        bits = 0
        for operation in operations:
            if self.allowed(principal, host, operation, resource_type, name):
                bits |= 1 << int(operation)
        return bits

    # -- the per-API gate -------------------------------------------------------------
    def check_request(self, ctx, api, request) -> dict | None:
        """None lets the request through (per-item checks, if any, are the handler's);
        otherwise the API's full response body refusing it. `api` is the API's catalog
        entry or a node's ServedApi of it (both carry `rule`, `name`, `error_response`)."""
        rule = api.rule
        if rule.operation is None or (not rule.on_brokers and ctx.services.is_broker):
            return None
        if self.authorize_cluster(ctx, rule.operation, api.name):
            return None
        return api_rules.refusal(api, ctx.api_version, request)


def _who(principal_text: str) -> tuple[str, ...]:
    """The ACL principals that apply: "User:*" stands for every User principal only
    (Kafka's StandardAuthorizer)."""
    if principal_text.startswith("User:") and principal_text != WILDCARD_PRINCIPAL:
        return (principal_text, WILDCARD_PRINCIPAL)
    return (principal_text,)


def _name(enum_type, value: int) -> str:
    try:
        return enum_type(value).name
    except ValueError:
        return str(value)


def build_authorizer(config, state_getter: Callable[[], Any]) -> StandardAuthorizer | None:
    """The authorizer `config.extra` asks for, or None (everything authorized)."""
    settings = authorizer_config(config.extra)
    return None if settings is None else StandardAuthorizer(settings, state_getter)

