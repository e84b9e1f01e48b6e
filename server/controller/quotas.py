"""Client quotas: AlterClientQuotas as a pure command, DescribeClientQuotas as a read.

Owns: `alter_client_quotas` (same contract as commands.py: `(state, request) ->
ControllerResult`, nothing mutated, the ClientQuotaRecords say everything),
`describe_client_quotas` (a response body from an image), the quota keys each entity
kind accepts (`QUOTA_KEYS`) and `entity_text` (Kafka's spelling of an entity in messages).

Facts carried over from Kafka's controller (ClientQuotaControlManager) and image
(ClientQuotasImage):
- An entity is a map of entity type to name (None: the default entity of that type);
  a type named twice in one request entry keeps its last name. Types are `user`,
  `client-id` and `ip`; `ip` stands alone. `user` and `client-id` entities (alone or
  together) accept producer_byte_rate and consumer_byte_rate (integers, Java longs),
  request_percentage and controller_mutation_rate (doubles); `ip` entities accept
  connection_creation_rate (an integer, a Java int).
- Every failure is INVALID_REQUEST for that entry only, with Kafka's message; the other
  entries still apply. An entry naming a quota key twice, or an entity an earlier entry
  of the request already named, fails with "Ignoring duplicate entity ..." (Kafka
  records the duplicate-key error under the entity and then finds the entity already
  answered); the response has one result per distinct entity.
- Checks, in Kafka's order: a non-empty entity, known types, no empty names, the type
  combination, an ip name that is an address; then per set key: a key the entity kind
  accepts, a value > 0, integers not fractional (more than 1e-6 off) and within the
  Java type's range. A removal is not validated: removing an absent key writes nothing.
- Setting a key to the value it already has writes nothing. Validate-only answers the
  same results with no records. Everything one request writes is one atomic batch.
- Describe: filter components (entity type, match type EXACT 0 / DEFAULT 1 / ANY 2,
  match string) with Kafka's refusals (an empty or repeated type, an unknown type
  (UNSUPPORTED_VERSION), a match string where none belongs or none where one does, an
  unknown match type, ip combined with user or client-id). An entity matches when it
  has every filtered type with the exact name (EXACT), the default (DEFAULT) or any
  name, the default included (ANY); `strict` also requires it to have no other types.

Difference from Kafka, on purpose: Kafka accepts an ip entity name that resolves as a
host name (InetAddress.getByName, a DNS lookup inside the controller); a pure command
cannot resolve, so only IPv4/IPv6 literals are accepted.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any, Iterable

from protocol import metadata_records as mr
from protocol.errors import ErrorCode
from protocol.records import MetadataRecord, record
from server.controller.commands import ControllerResult
from server.controller.state import ControllerState, QuotaEntity, quota_entity

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

MATCH_TYPE_EXACT, MATCH_TYPE_DEFAULT, MATCH_TYPE_ANY = 0, 1, 2

# How Kafka's ConfigDef types each quota key; the type decides which values it takes.
_DOUBLE, _INT, _LONG = "DOUBLE", "INT", "LONG"
_USER_CLIENT_KEYS = {
    "producer_byte_rate": _LONG,
    "consumer_byte_rate": _LONG,
    "request_percentage": _DOUBLE,
    "controller_mutation_rate": _DOUBLE,
}
_IP_KEYS = {"connection_creation_rate": _INT}
# Which keys an entity kind accepts: "user/client-id" covers user, client-id and both.
QUOTA_KEYS = {"user/client-id": tuple(_USER_CLIENT_KEYS), IP: tuple(_IP_KEYS)}

# Java's Integer.MAX_VALUE and Long.MAX_VALUE as doubles, as Kafka compares them.
_INT_MAX = float(2**31 - 1)
_LONG_MAX = float(2**63 - 1)
# Kafka's tolerance for an integer-valued quota given as a double.
_FRACTION_TOLERANCE = 1e-6


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _get(data: Any, key: str, default: Any = None) -> Any:
    value = data.get(key, default) if hasattr(data, "get") else getattr(data, key, default)
    return default if value is None else value


def entity_text(entity: QuotaEntity) -> str:
    """Kafka's ClientQuotaEntity.toString: `ClientQuotaEntity(entries={client-id=a, user=b})`
    (for the combinations Kafka accepts, Java's HashMap iterates them in this sorted order)."""
    inner = ", ".join(f"{entity_type}={'null' if name is None else name}" for entity_type, name in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _entity_data(entity: QuotaEntity) -> list[dict[str, Any]]:
    return [{"entity_type": entity_type, "entity_name": name} for entity_type, name in entity]


# -- AlterClientQuotas ------------------------------------------------------------------

def _accepted_keys(entity: QuotaEntity) -> dict[str, str]:
    """The quota keys `entity` accepts, or _Refused (Kafka's validateEntity and
    configKeysForEntityType, in their order)."""
    if not entity:
        raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    for entity_type, name in entity:
        if entity_type not in ENTITY_TYPES:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")
    types = dict(entity)
    if IP in types:
        if USER in types or CLIENT_ID in types:
            # Kafka's message, its missing space included.
            raise _Refused(ErrorCode.INVALID_REQUEST,
                           "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        if not _is_ip_entity_name(types[IP]):
            raise _Refused(ErrorCode.INVALID_REQUEST, f"{types[IP]} is not a valid IP or resolvable host.")
        return _IP_KEYS
    return _USER_CLIENT_KEYS


def _is_ip_entity_name(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _check_value(keys: dict[str, str], key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue: raises _Refused for a key or value it refuses."""
    kind = keys.get(key)
    if kind is None:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if value <= 0.0:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if kind == _DOUBLE:
        return
    if kind == _INT and value > _INT_MAX:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large for an INT.")
    if kind == _LONG and value > _LONG_MAX:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large for a LONG.")
    # Java's `%` on doubles keeps the dividend's sign, as math.fmod does; NaN passes, as in Kafka.
    if abs(math.fmod(value, 1.0)) > _FRACTION_TOLERANCE:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def _entity_records(state: ControllerState, entity: QuotaEntity,
                    alterations: dict[str, float | None]) -> list[MetadataRecord]:
    """The records that apply `alterations` ({key: value, None to remove}) to `entity`,
    or _Refused; all of an entity's records or none."""
    keys = _accepted_keys(entity)
    current = state.client_quotas().get(entity, {})
    records = []
    for key, value in alterations.items():
        if value is None:
            if key in current:
                records.append(record(mr.CLIENT_QUOTA_RECORD, {
                    "entity": _entity_data(entity), "key": key, "value": 0.0, "remove": True}, version=0))
            continue
        _check_value(keys, key, value)
        if current.get(key) != value:
            records.append(record(mr.CLIENT_QUOTA_RECORD, {
                "entity": _entity_data(entity), "key": key, "value": value, "remove": False}, version=0))
    return records


def request_entity(entry: Any) -> QuotaEntity:
    """The entity an AlterClientQuotas entry names."""
    return quota_entity((_get(e, "entity_type"), _get(e, "entity_name")) for e in _get(entry, "entity", ()))


def alter_client_quotas(state: ControllerState, request: Any) -> ControllerResult:
    """AlterClientQuotas v0-1: ClientQuotaRecords for every valid entry (none when
    validate-only); one result per distinct entity, in first-named order."""
    records: list[MetadataRecord] = []
    results: dict[QuotaEntity, tuple[int, str | None]] = {}
    for entry in _get(request, "entries", ()):
        entity = request_entity(entry)
        alterations: dict[str, float | None] = {}
        for op in _get(entry, "ops", ()):
            key = _get(op, "key")
            if key in alterations:
                results[entity] = (ErrorCode.INVALID_REQUEST,
                                   f"Duplicate quota key {key} not updating quota for this entity "
                                   f"{entity_text(entity)}")
            else:
                alterations[key] = None if _get(op, "remove", False) else float(_get(op, "value", 0.0))
        if entity in results:
            results[entity] = (ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {entity_text(entity)}")
            continue
        try:
            records.extend(_entity_records(state, entity, alterations))
        except _Refused as refused:
            results[entity] = (refused.code, refused.message)
            continue
        results[entity] = (ErrorCode.NONE, None)
    if _get(request, "validate_only", False):
        records = []
    response = {"throttle_time_ms": 0, "entries": [
        {"error_code": int(code), "error_message": message, "entity": _entity_data(entity)}
        for entity, (code, message) in results.items()]}
    return ControllerResult(records, response, atomic=True)


def alter_error_response(request: Any, code: int, message: str | None) -> dict:
    """The whole AlterClientQuotas request refused: `code` for every entry."""
    return {"throttle_time_ms": 0, "entries": [
        {"error_code": int(code), "error_message": message, "entity": _entity_data(request_entity(entry))}
        for entry in _get(request, "entries", ())]}


# -- DescribeClientQuotas ---------------------------------------------------------------

def _filter(components: Iterable[Any]) -> tuple[dict[str, str | None], set[str]]:
    """(exact names by type, types matched by any name) or _Refused, as Kafka checks them."""
    exact: dict[str, str | None] = {}
    any_name: set[str] = set()
    for component in components:
        entity_type = _get(component, "entity_type", "")
        match = _get(component, "match")
        match_type = _get(component, "match_type", 0)
        if entity_type == "":
            raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if entity_type in exact or entity_type in any_name:
            raise _Refused(ErrorCode.INVALID_REQUEST,
                           f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in ENTITY_TYPES:
            raise _Refused(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
        if match_type == MATCH_TYPE_EXACT:
            if match is None:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_TYPE_DEFAULT:
            if match is not None:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_TYPE_ANY:
            if match is not None:
                raise _Refused(ErrorCode.INVALID_REQUEST,
                               "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            any_name.add(entity_type)
        else:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown match type {match_type}")
    named = set(exact) | any_name
    if IP in named and (USER in named or CLIENT_ID in named):
        raise _Refused(ErrorCode.INVALID_REQUEST,
                       "Invalid entity filter component combination. IP filter component should not be used "
                       "with user or clientId filter component.")
    return exact, any_name


def _matches(entity: QuotaEntity, exact: dict[str, str | None], any_name: set[str], strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(exact) + len(any_name):
        return False
    for entity_type, name in exact.items():
        if entity_type not in names or names[entity_type] != name:
            return False
    return all(entity_type in names for entity_type in any_name)


def _entity_order(entity: QuotaEntity) -> tuple:
    # Deterministic on every node (replay order differs after a snapshot): by type, the
    # default (None) name before named ones.
    return tuple((entity_type, name is not None, name or "") for entity_type, name in entity)


def describe_client_quotas(state: ControllerState, request: Any) -> dict[str, Any]:
    """DescribeClientQuotas v0-1: the entities the filter matches with their quota values.
    A refused filter answers its error code and message with null entries, as Kafka."""
    try:
        exact, any_name = _filter(_get(request, "components", ()))
    except _Refused as refused:
        return describe_error_response(request, refused.code, refused.message)
    strict = bool(_get(request, "strict", False))
    quotas = state.client_quotas()
    entries = []
    for entity in sorted(quotas, key=_entity_order):
        if _matches(entity, exact, any_name, strict):
            values = quotas[entity]
            entries.append({"entity": _entity_data(entity),
                            "values": [{"key": key, "value": values[key]} for key in sorted(values)]})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}


def describe_error_response(request: Any, code: int, message: str | None) -> dict:
    """The whole DescribeClientQuotas request refused (Kafka leaves the entries null)."""
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message, "entries": None}
