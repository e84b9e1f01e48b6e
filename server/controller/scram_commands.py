"""Pure SCRAM credential commands: AlterUserScramCredentials, DescribeUserScramCredentials,
and the `--add-scram` bootstrap credentials of `kraftwerk storage format`.

Owns: `alter_user_scram_credentials` (request -> UserScramCredentialRecord /
RemoveUserScramCredentialRecord records + one result per user),
`describe_user_scram_credentials` (a read of the committed image),
`parse_add_scram` and `bootstrap_scram_records` (format time).

Kafka's rules carried over (ScramControlManager, ScramImage.describe, ScramParser):
- One result per user. A user named twice in one request (two deletions, two
  upsertions, or one of each) gets DUPLICATE_RESOURCE ("A user credential cannot be
  altered twice in the same request") and nothing is written for that user; the
  first error a user gets is the one reported.
- Empty name -> UNACCEPTABLE_CREDENTIAL ("Username must not be empty"); mechanism not
  SCRAM-SHA-256/512 -> UNSUPPORTED_SASL_MECHANISM ("Unknown SCRAM mechanism");
  iterations outside [4096, 16384] -> UNACCEPTABLE_CREDENTIAL ("Too few iterations" /
  "Too many iterations"); deleting a credential that does not exist ->
  RESOURCE_NOT_FOUND ("Attempt to delete a user credential that does not exist");
  metadata.version below 3.5-IV2 -> UNSUPPORTED_VERSION ("The current metadata.version
  does not support SCRAM").
- The request carries the salted password; the controller derives StoredKey and
  ServerKey and stores those (never the salted password).
- Describe: users null or empty means every user; a user with no credential gets
  RESOURCE_NOT_FOUND ("attemptToDescribeUserThatDoesNotExist: NAME"), a user named
  twice DUPLICATE_RESOURCE.

Differences, on purpose: an empty salt or an empty salted password is refused with
UNACCEPTABLE_CREDENTIAL (Kafka's admin client checks this, its controller does not);
results follow the request's order (Kafka's follow HashMap order).

Rules kept here: the `commands.py` contract — nothing is mutated, a refused entry
writes nothing, everything an AlterUserScramCredentials writes is one atomic batch.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any, Callable

from protocol import metadata_records as mr
from protocol.errors import ErrorCode
from protocol.records import MetadataRecord, record
from server.controller.commands import ControllerResult
from server.controller.state import ControllerState
from server.security import scram
from server.security.model import ScramCredential, ScramMechanism

# 3.5-IV2: the first metadata.version that stores SCRAM credentials (KIP-554 in KRaft).
SCRAM_METADATA_VERSION_LEVEL = 11

DUPLICATE_MESSAGE = "A user credential cannot be altered twice in the same request"
NOT_SUPPORTED_MESSAGE = "The current metadata.version does not support SCRAM"


def _field(data: Any, key: str, default: Any = None) -> Any:
    if isinstance(data, dict):
        return data.get(key, default)
    return getattr(data, key, default)


def _mechanism(code: int) -> ScramMechanism:
    try:
        return ScramMechanism(code)
    except ValueError:
        return ScramMechanism.UNKNOWN


def _name_and_mechanism_error(name: str, mechanism: ScramMechanism) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism is ScramMechanism.UNKNOWN:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _upsertion_error(upsertion: Any) -> tuple[int, str] | None:
    name = _field(upsertion, "name", "") or ""
    error = _name_and_mechanism_error(name, _mechanism(_field(upsertion, "mechanism", 0)))
    if error is not None:
        return error
    reason = scram.check_iterations(int(_field(upsertion, "iterations", 0)))
    if reason is not None:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, reason
    if not _field(upsertion, "salt", b""):
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"
    if not _field(upsertion, "salted_password", b""):
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "SaltedPassword must not be empty"
    return None


def _deletion_error(state: ControllerState, deletion: Any) -> tuple[int, str] | None:
    name = _field(deletion, "name", "") or ""
    mechanism = _mechanism(_field(deletion, "mechanism", 0))
    error = _name_and_mechanism_error(name, mechanism)
    if error is not None:
        return error
    if state.scram_credential(name, int(mechanism)) is None:
        return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


def credential_record(credential: ScramCredential) -> MetadataRecord:
    return record(mr.USER_SCRAM_CREDENTIAL_RECORD, {
        "name": credential.user, "mechanism": int(credential.mechanism), "salt": credential.salt,
        "stored_key": credential.stored_key, "server_key": credential.server_key,
        "iterations": credential.iterations}, 0)


def alter_user_scram_credentials(state: ControllerState, request: Any) -> ControllerResult:
    supported = (state.metadata_version or 0) >= SCRAM_METADATA_VERSION_LEVEL
    order: dict[str, None] = {}  # users in the order the request first names them (a dict: O(1) lookups)
    errors: dict[str, tuple[int, str]] = {}
    deletions: dict[str, Any] = {}
    upsertions: dict[str, Any] = {}

    def admit(name: str, entry: Any, into: dict[str, Any], check: Callable[[], tuple[int, str] | None]) -> None:
        order.setdefault(name, None)
        if name in errors:
            return
        if name in deletions or name in upsertions:
            deletions.pop(name, None)
            upsertions.pop(name, None)
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_MESSAGE)
            return
        if not supported:
            errors[name] = (ErrorCode.UNSUPPORTED_VERSION, NOT_SUPPORTED_MESSAGE)
            return
        error = check()
        if error is not None:
            errors[name] = error
        else:
            into[name] = entry

    for deletion in _field(request, "deletions", None) or ():
        name = _field(deletion, "name", "") or ""
        admit(name, deletion, deletions, lambda d=deletion: _deletion_error(state, d))
    for upsertion in _field(request, "upsertions", None) or ():
        name = _field(upsertion, "name", "") or ""
        admit(name, upsertion, upsertions, lambda u=upsertion: _upsertion_error(u))

    records: list[MetadataRecord] = []
    for name, deletion in deletions.items():
        records.append(record(mr.REMOVE_USER_SCRAM_CREDENTIAL_RECORD, {
            "name": name, "mechanism": int(_field(deletion, "mechanism", 0))}, 0))
    for name, upsertion in upsertions.items():
        credential = scram.credential_from_salted_password(
            name, _mechanism(_field(upsertion, "mechanism", 0)), bytes(_field(upsertion, "salt", b"")),
            bytes(_field(upsertion, "salted_password", b"")), int(_field(upsertion, "iterations", 0)))
        records.append(credential_record(credential))
    results = []
    for name in order:
        code, message = errors.get(name, (ErrorCode.NONE, None))
        results.append({"user": name, "error_code": int(code), "error_message": message})
    return ControllerResult(records, {"throttle_time_ms": 0, "results": results}, atomic=True)


def altered_summary(request: Any, response: dict) -> dict[str, list[str]]:
    """{user: [mechanism names]} of what a request changed successfully, for the log
    (user names and mechanisms only)."""
    ok = {r["user"] for r in response["results"] if r["error_code"] == 0}
    summary: dict[str, list[str]] = {}
    for kind in ("deletions", "upsertions"):
        for entry in _field(request, kind, None) or ():
            name = _field(entry, "name", "")
            if name in ok:
                mechanism = _mechanism(_field(entry, "mechanism", 0))
                summary.setdefault(name, []).append(("-" if kind == "deletions" else "+") + mechanism.mechanism_name)
    return summary


def describe_user_scram_credentials(state: ControllerState, request: Any) -> dict[str, Any]:
    credentials = state.scram_credentials()
    by_user: dict[str, list[ScramCredential]] = {}
    for (user, _), credential in credentials.items():
        by_user.setdefault(user, []).append(credential)
    users = _field(request, "users", None)
    named: dict[str, bool] = {}  # user -> named more than once
    if not users:
        for user in sorted(by_user):
            named[user] = False
    else:
        for entry in users:
            name = _field(entry, "name", "") or ""
            named[name] = name in named
    results = []
    for user, duplicate in named.items():
        if duplicate:
            results.append({"user": user, "error_code": int(ErrorCode.DUPLICATE_RESOURCE),
                            "error_message": "Cannot describe SCRAM credentials for the same user twice in a "
                                             f"single request: {user}", "credential_infos": []})
            continue
        found = sorted(by_user.get(user, ()), key=lambda c: int(c.mechanism))
        if not found:
            results.append({"user": user, "error_code": int(ErrorCode.RESOURCE_NOT_FOUND),
                            "error_message": f"attemptToDescribeUserThatDoesNotExist: {user}",
                            "credential_infos": []})
            continue
        results.append({"user": user, "error_code": 0, "error_message": None, "credential_infos": [
            {"mechanism": int(c.mechanism), "iterations": c.iterations} for c in found]})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


# ---------------------------------------------------------------------------
# kraftwerk storage format --add-scram
# ---------------------------------------------------------------------------

def _split_entries(body: str) -> list[str]:
    """Comma-separated key=value entries; commas inside double quotes do not split."""
    entries, current, quoted = [], [], False
    for char in body:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            entries.append("".join(current))
            current = []
        else:
            current.append(char)
    if quoted:
        raise ValueError("unterminated quote")
    entries.append("".join(current))
    return [entry.strip() for entry in entries if entry.strip()]


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _base64(value: str, key: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{key} is not base64") from None


def parse_add_scram(text: str, random_bytes: Callable[[int], bytes] = os.urandom) -> ScramCredential:
    """One `--add-scram` argument, Kafka's syntax:
    `SCRAM-SHA-256=[name=alice,password=alice-secret]`, optionally with `iterations=N`,
    `salt=<base64>`, or `saltedpassword=<base64>` (with `salt`) instead of the password.
    Errors never repeat the password."""
    mechanism_name, sep, rest = text.partition("=")
    mechanism = ScramMechanism.from_name(mechanism_name)
    if not sep or mechanism is ScramMechanism.UNKNOWN or mechanism_name.strip() != mechanism.mechanism_name:
        raise ValueError(f"--add-scram must start with SCRAM-SHA-256= or SCRAM-SHA-512= "
                         f"(got {mechanism_name.strip()[:32]!r})")
    rest = rest.strip()
    if not (rest.startswith("[") and rest.endswith("]")):
        raise ValueError("--add-scram needs its settings in brackets: SCRAM-SHA-256=[name=...,password=...]")
    values: dict[str, str] = {}
    for entry in _split_entries(rest[1:-1]):
        key, eq, value = entry.partition("=")
        key = key.strip().lower()
        if not eq or key not in ("name", "password", "saltedpassword", "salt", "iterations"):
            raise ValueError(f"--add-scram: unknown setting {key[:32]!r} (name, password, saltedpassword, "
                             "salt, iterations)")
        if key in values:
            raise ValueError(f"--add-scram: {key} given twice")
        values[key] = _unquote(value)
    name = values.get("name", "")
    if not name:
        raise ValueError("--add-scram needs name=")
    if ("password" in values) == ("saltedpassword" in values):
        raise ValueError("--add-scram needs exactly one of password= and saltedpassword=")
    iterations_text = values.get("iterations", str(scram.MIN_ITERATIONS))
    if not iterations_text.isdigit():
        raise ValueError("--add-scram: iterations must be a number")
    iterations = int(iterations_text)
    reason = scram.check_iterations(iterations)
    if reason is not None:
        raise ValueError(f"--add-scram: {reason.lower()} ({iterations}; allowed {scram.MIN_ITERATIONS}-"
                         f"{scram.MAX_ITERATIONS})")
    salt = _base64(values["salt"], "salt") if "salt" in values else random_bytes(scram.SALT_BYTES)
    if not salt:
        raise ValueError("--add-scram: the salt must not be empty")
    if "saltedpassword" in values:
        if "salt" not in values:
            raise ValueError("--add-scram: saltedpassword= needs salt=")
        salted = _base64(values["saltedpassword"], "saltedpassword")
        if len(salted) != scram.digest_bytes(mechanism):
            raise ValueError(f"--add-scram: saltedpassword must be {scram.digest_bytes(mechanism)} bytes "
                             f"for {mechanism.mechanism_name}")
        return scram.credential_from_salted_password(name, mechanism, salt, salted, iterations)
    if not values["password"]:
        raise ValueError("--add-scram: the password must not be empty")
    return scram.new_credential(name, mechanism, values["password"], salt=salt, iterations=iterations)


def bootstrap_scram_records(arguments: list[str] | None, metadata_version_level: int,
                            random_bytes: Callable[[int], bytes] = os.urandom) -> list[MetadataRecord]:
    """UserScramCredentialRecords for `storage format`; ValueError for a bad argument,
    a (user, mechanism) given twice, or a metadata.version below 3.5-IV2."""
    if not arguments:
        return []
    if metadata_version_level < SCRAM_METADATA_VERSION_LEVEL:
        raise ValueError("SCRAM is only supported in metadata.version 3.5-IV2 or later.")
    seen: set[tuple[str, int]] = set()
    records = []
    for argument in arguments:
        credential = parse_add_scram(argument, random_bytes)
        key = (credential.user, int(credential.mechanism))
        if key in seen:
            raise ValueError(f"--add-scram names {credential.mechanism.mechanism_name} for {credential.user!r} twice")
        seen.add(key)
        records.append(credential_record(credential))
    return records
