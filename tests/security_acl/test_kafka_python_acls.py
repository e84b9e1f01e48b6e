"""kafka-python 3.0.12's KafkaAdminClient ACL calls against a real controller process
(PLAINTEXT, so the client is User:ANONYMOUS)."""

from __future__ import annotations

import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import ClusterAuthorizationFailedError

from e2e.helpers import ControllerFactory

pytestmark = pytest.mark.e2e

AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture
def controllers(tmp_path):
    factory = ControllerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


def admin_for(controller) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=controller.address, request_timeout_ms=10_000,
                            client_id="kraftwerk-acl-e2e")


def acl(name, principal="User:alice", operation=ACLOperation.READ, pattern=ACLResourcePatternType.LITERAL,
        permission=ACLPermissionType.ALLOW) -> ACL:
    return ACL(principal=principal, host="*", operation=operation, permission_type=permission,
               resource_pattern=ResourcePattern(ResourceType.TOPIC, name, pattern))


def test_create_describe_delete_acls(controllers):
    controller = controllers.new(overrides=(AUTHORIZER, "super.users=User:ANONYMOUS"))
    admin = admin_for(controller)
    try:
        created = admin.create_acls([acl("orders"), acl("pay-", "User:bob", ACLOperation.WRITE,
                                                        ACLResourcePatternType.PREFIXED),
                                     acl("orders", permission=ACLPermissionType.DENY, operation=ACLOperation.WRITE)])
        assert len(created["succeeded"]) == 3 and created["failed"] == []
        controller.wait_for_event("security.acls_created", created=3)
        # Creating the same binding again succeeds without duplicating it.
        assert len(admin.create_acls([acl("orders")])["succeeded"]) == 1

        everything = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                               permission_type=ACLPermissionType.ANY,
                               resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                                      ACLResourcePatternType.ANY))
        acls, error = admin.describe_acls(everything)
        assert sorted((a.resource_pattern.resource_name, a.principal, a.operation, a.permission_type)
                      for a in acls) == [
            ("orders", "User:alice", ACLOperation.READ, ACLPermissionType.ALLOW),
            ("orders", "User:alice", ACLOperation.WRITE, ACLPermissionType.DENY),
            ("pay-", "User:bob", ACLOperation.WRITE, ACLPermissionType.ALLOW)]

        matching = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                             permission_type=ACLPermissionType.ANY,
                             resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, "pay-now",
                                                                    ACLResourcePatternType.MATCH))
        acls, _ = admin.describe_acls(matching)
        assert [(a.resource_pattern.resource_name, a.resource_pattern.pattern_type) for a in acls] == [
            ("pay-", ACLResourcePatternType.PREFIXED)]

        alice = ACLFilter(principal="User:alice", host=None, operation=ACLOperation.ANY,
                          permission_type=ACLPermissionType.ANY,
                          resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
        ((_, deleted, error),) = admin.delete_acls([alice])
        assert error.errno == 0
        assert sorted((a.resource_pattern.resource_name, a.operation) for a in deleted) == [
            ("orders", ACLOperation.READ), ("orders", ACLOperation.WRITE)]
        acls, _ = admin.describe_acls(everything)
        assert [a.principal for a in acls] == ["User:bob"]
        controller.wait_for_event("security.acls_deleted", deleted=2)
        controller.assert_alive()
    finally:
        admin.close()


def test_anonymous_without_acls_is_refused(controllers):
    controller = controllers.new(overrides=(AUTHORIZER,))
    admin = admin_for(controller)
    try:
        created = admin.create_acls([acl("orders")])
        assert created["succeeded"] == [] and created["failed"] == [ClusterAuthorizationFailedError]
        everything = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                               permission_type=ACLPermissionType.ANY,
                               resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                                      ACLResourcePatternType.ANY))
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(everything)
        refusal = controller.wait_for_event("security.authorization_failed", api="DescribeAcls")
        assert refusal["principal"] == "User:ANONYMOUS" and refusal["operation"] == "DESCRIBE"
    finally:
        admin.close()
