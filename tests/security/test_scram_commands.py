"""SCRAM credential commands (server/controller/scram_commands.py): AlterUserScramCredentials
records and per-user errors, DescribeUserScramCredentials, `storage format --add-scram`, and
the gating and downgrade catalog entries of the new APIs and record."""

from __future__ import annotations

import base64
import hashlib

import pytest

from protocol.apis import alter_user_scram_credentials as alter_api
from protocol.apis import describe_user_scram_credentials as describe_api
from protocol.errors import ErrorCode
from protocol.records import decode_metadata_record, encode_metadata_record
from server.api.catalog import NodeRole, served_table
from server.controller import downgrade
from server.controller.commands import bootstrap_records
from server.controller.scram_commands import (
    alter_user_scram_credentials,
    bootstrap_scram_records,
    describe_user_scram_credentials,
    parse_add_scram,
)
from server.controller.state import ControllerState
from server.gating import gated_ranges
from server.security import scram
from server.security.model import ScramMechanism

SHA256, SHA512 = 1, 2
MV_3_5_IV1, MV_3_5_IV2, MV_3_7_IV4 = 10, 11, 19


class Image:
    """Replays records through an encode/decode round trip, as the log would."""

    def __init__(self, level: int = MV_3_7_IV4) -> None:
        self.state = ControllerState("MkU3OEVBNTcwNTJENDM2Qg")
        self.offset = 0
        self.append(bootstrap_records(level))

    def append(self, records) -> None:
        for item in records:
            self.state.replay(decode_metadata_record(encode_metadata_record(item)), self.offset)
            self.offset += 1

    def alter(self, deletions=(), upsertions=()):
        request = alter_api.REQUEST.decode(0, alter_api.REQUEST.encode(0, {
            "deletions": list(deletions), "upsertions": list(upsertions)}))
        result = alter_user_scram_credentials(self.state, request)
        alter_api.RESPONSE.encode(0, result.response)  # the response must be encodable
        self.append(result.records)
        return result

    def describe(self, users):
        body = {"users": None if users is None else [{"name": u} for u in users]}
        request = describe_api.REQUEST.decode(0, describe_api.REQUEST.encode(0, body))
        response = describe_user_scram_credentials(self.state, request)
        describe_api.RESPONSE.encode(0, response)
        return response


def upsertion(name, password="pw", mechanism=SHA256, iterations=4096, salt=b"0123456789abcdef"):
    hash_name = "sha256" if mechanism == SHA256 else "sha512"
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations) if mechanism in (1, 2) else b"x"
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": salted}


def results(result):
    return [(r["user"], r["error_code"], r["error_message"]) for r in result.response["results"]]


def test_upsertion_stores_derived_keys_never_the_salted_password():
    image = Image()
    entry = upsertion("alice", "alice-pw", SHA512, 8192)
    result = image.alter(upsertions=[entry])
    assert results(result) == [("alice", 0, None)] and result.atomic
    (record,) = result.records
    assert record.message.name == "UserScramCredentialRecord"
    assert entry["salted_password"] not in record.data.values()
    credential = image.state.scram_credential("alice", SHA512)
    assert credential.iterations == 8192 and scram.password_matches(credential, "alice-pw")
    assert not scram.password_matches(credential, "other")


def test_deletion_removes_and_a_missing_credential_is_not_found():
    image = Image()
    image.alter(upsertions=[upsertion("alice")])
    assert results(image.alter(deletions=[{"name": "alice", "mechanism": SHA512}])) == [
        ("alice", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")]
    result = image.alter(deletions=[{"name": "alice", "mechanism": SHA256}])
    assert results(result) == [("alice", 0, None)]
    assert result.records[0].message.name == "RemoveUserScramCredentialRecord"
    assert image.state.scram_credential("alice", SHA256) is None


@pytest.mark.parametrize("entry, code, message", [
    (upsertion("a", iterations=4095), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
    (upsertion("a", iterations=16385), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
    (upsertion("", iterations=4096), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
    (upsertion("a", salt=b""), ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"),
    (dict(upsertion("a"), salted_password=b""), ErrorCode.UNACCEPTABLE_CREDENTIAL,
     "SaltedPassword must not be empty"),
    (upsertion("a", mechanism=0), ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
    (upsertion("a", mechanism=3), ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
])
def test_unacceptable_upsertions_write_nothing(entry, code, message):
    image = Image()
    result = image.alter(upsertions=[entry])
    assert results(result) == [(entry["name"], code, message)] and result.records == []


def test_a_user_named_twice_is_a_duplicate_and_others_still_succeed():
    image = Image()
    image.alter(upsertions=[upsertion("carol")])
    result = image.alter(
        deletions=[{"name": "carol", "mechanism": SHA256}],
        upsertions=[upsertion("bob"), upsertion("carol", mechanism=SHA512), upsertion("bob", mechanism=SHA512),
                    upsertion("dave")])
    duplicate = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    assert results(result) == [("carol", *duplicate), ("bob", *duplicate), ("dave", 0, None)]
    assert [r.data["name"] for r in result.records] == ["dave"]
    assert image.state.scram_credential("carol", SHA256) is not None  # untouched


def test_first_error_of_a_user_is_kept():
    result = Image().alter(upsertions=[upsertion("e", iterations=1), upsertion("e")])
    assert results(result) == [("e", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")]


def test_before_3_5_iv2_scram_is_not_supported():
    result = Image(MV_3_5_IV1).alter(upsertions=[upsertion("alice")],
                                     deletions=[{"name": "bob", "mechanism": SHA256}])
    assert results(result) == [
        ("bob", ErrorCode.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM"),
        ("alice", ErrorCode.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM")]
    assert result.records == []
    assert results(Image(MV_3_5_IV2).alter(upsertions=[upsertion("alice")])) == [("alice", 0, None)]


def test_describe_lists_mechanisms_and_iterations_and_reports_missing_users():
    image = Image()
    image.alter(upsertions=[upsertion("alice", mechanism=SHA512, iterations=8192), upsertion("bob")])
    image.alter(upsertions=[upsertion("alice", mechanism=SHA256)])
    everyone = image.describe(None)
    assert everyone["error_code"] == 0
    assert [(r["user"], r["error_code"], [(c["mechanism"], c["iterations"]) for c in r["credential_infos"]])
            for r in everyone["results"]] == [("alice", 0, [(1, 4096), (2, 8192)]), ("bob", 0, [(1, 4096)])]
    assert [r["user"] for r in image.describe([])["results"]] == ["alice", "bob"]
    named = image.describe(["bob", "zed", "bob"])["results"]
    assert [(r["user"], r["error_code"], r["error_message"]) for r in named] == [
        ("bob", ErrorCode.DUPLICATE_RESOURCE,
         "Cannot describe SCRAM credentials for the same user twice in a single request: bob"),
        ("zed", ErrorCode.RESOURCE_NOT_FOUND, "attemptToDescribeUserThatDoesNotExist: zed")]


def test_add_scram_argument_in_kafkas_syntax():
    credential = parse_add_scram("SCRAM-SHA-256=[name=admin,password=admin-secret]")
    assert (credential.user, credential.mechanism, credential.iterations) == ("admin", ScramMechanism.SCRAM_SHA_256, 4096)
    assert scram.password_matches(credential, "admin-secret")
    salt = b"1lv4pdnw4fwq7notcxm0yy1k7q"
    quoted = parse_add_scram(f'SCRAM-SHA-512=[name="al,ice",password="a,b",iterations=8192,'
                             f'salt="{base64.b64encode(salt).decode()}"]')
    assert (quoted.user, quoted.iterations, quoted.salt) == ("al,ice", 8192, salt)
    assert scram.password_matches(quoted, "a,b")
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", salt, 4096)
    from_salted = parse_add_scram(f"SCRAM-SHA-256=[name=x,salt={base64.b64encode(salt).decode()},"
                                  f"saltedpassword={base64.b64encode(salted).decode()}]")
    assert scram.password_matches(from_salted, "pw")


@pytest.mark.parametrize("text", [
    "SCRAM-SHA-1=[name=a,password=b]",
    "SCRAM-SHA-256=name=a,password=b",
    "SCRAM-SHA-256=[password=b]",
    "SCRAM-SHA-256=[name=a]",
    "SCRAM-SHA-256=[name=a,password=b,saltedpassword=c2FsdA==]",
    "SCRAM-SHA-256=[name=a,password=b,iterations=100]",
    "SCRAM-SHA-256=[name=a,password=b,colour=red]",
    "SCRAM-SHA-256=[name=a,saltedpassword=c2FsdA==]",
    "SCRAM-SHA-256=[name=a,password=\"unterminated]",
])
def test_bad_add_scram_arguments_are_refused_without_echoing_the_password(text):
    with pytest.raises(ValueError) as caught:
        parse_add_scram(text)
    assert "password=b" not in str(caught.value)


def test_bootstrap_records_replay_into_credentials():
    records = bootstrap_scram_records(["SCRAM-SHA-256=[name=admin,password=s3cret]",
                                       "SCRAM-SHA-512=[name=admin,password=s3cret]"], MV_3_7_IV4)
    image = Image()
    image.append(records)
    assert scram.password_matches(image.state.scram_credential("admin", SHA512), "s3cret")
    with pytest.raises(ValueError, match="3.5-IV2"):
        bootstrap_scram_records(["SCRAM-SHA-256=[name=a,password=b]"], MV_3_5_IV1)
    with pytest.raises(ValueError, match="twice"):
        bootstrap_scram_records(["SCRAM-SHA-256=[name=a,password=b]"] * 2, MV_3_7_IV4)
    assert bootstrap_scram_records(None, MV_3_5_IV1) == []


def test_new_apis_are_served_and_advertised_at_every_metadata_version():
    for table in (served_table(NodeRole.CONTROLLER), served_table(NodeRole.BROKER)):
        ranges = {api.api_key: (api.min_version, api.max_version) for api in table.values()}
        for level in (4, 10, 11, 19, 22):
            gated = gated_ranges(ranges, level)
            assert gated[17] == (0, 1) and gated[36] == (0, 2) and gated[50] == (0, 0) and gated[51] == (0, 0)
    assert served_table(NodeRole.BROKER)[51].handler.__module__ == "server.handlers.forwarded"
    assert served_table(NodeRole.BROKER)[50].handler.__module__ == "server.handlers.describe_user_scram_credentials"


def test_downgrade_catalog_lists_scram_credentials_from_3_5_iv2():
    assert "UserScramCredentialRecord records (since 3.5-IV2)" in downgrade.dropped_record_types(MV_3_7_IV4, 10)
    assert "UserScramCredentialRecord records (since 3.5-IV2)" not in downgrade.dropped_record_types(MV_3_7_IV4, 11)


def test_storage_format_writes_add_scram_credentials_into_the_bootstrap_records(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from server.nodes.controller import read_bootstrap_checkpoint

    root = Path(__file__).resolve().parents[2]

    def kraftwerk(*argv):
        return subprocess.run([sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True,
                              cwd=root, timeout=60)

    directory = tmp_path / "metadata"
    done = kraftwerk("storage", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg", "--override",
                     f"metadata.log.dir={directory}", "--add-scram",
                     "SCRAM-SHA-256=[name=admin,password=admin-secret]",
                     "-S", "SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=8192]")
    assert done.returncode == 0, done.stderr
    assert "admin-secret" not in done.stdout + done.stderr
    image = Image(level=MV_3_7_IV4)
    image.state = ControllerState("MkU3OEVBNTcwNTJENDM2Qg")
    image.offset = 0
    image.append(read_bootstrap_checkpoint(directory))
    assert scram.password_matches(image.state.scram_credential("admin", SHA256), "admin-secret")
    assert image.state.scram_credential("alice", SHA512).iterations == 8192
    refused = kraftwerk("storage", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg", "--override",
                        f"metadata.log.dir={tmp_path / 'old'}", "-r", "3.5-IV1", "-S",
                        "SCRAM-SHA-256=[name=admin,password=admin-secret]")
    assert refused.returncode != 0 and "3.5-IV2" in refused.stderr
    assert not (tmp_path / "old").exists()
