"""Forwarded writes: applied at most once under one forward id, and answered through a
broker only once that broker's own image holds them (read-your-writes). A real
controller and broker in-process, real sockets."""

from __future__ import annotations

import os

import trio

from protocol.errors import ErrorCode
from protocol.frames import decode_response, encode_request
from server.broker.lifecycle import BrokerState
from server.client import KafkaClient
from server.controller.answers import COMMITTED_OFFSET_TAG, FORWARD_ID_TAG, decode_offset, tagged, with_tag
from server.controller.topics import TopicErrorCode
from server.security.envelope import ENVELOPE_KEY, address_bytes, serialize_principal
from server.security.model import ANONYMOUS

from .harness import running_cluster

TIMEOUT_S = 30
MV_3_7_IV4 = 19
CREATE_TOPICS, CREATE_TOPICS_VERSION = 19, 7
METADATA, METADATA_VERSION = 3, 12


def create_topics_body(name: str) -> dict:
    return {"topics": [{"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 5000, "validate_only": False}


def envelope(inner: bytes, forward_id: bytes | None) -> dict:
    body = {"request_data": inner[4:], "request_principal": serialize_principal(ANONYMOUS),
            "client_host_address": address_bytes("127.0.0.1")}
    return body if forward_id is None else with_tag(body, FORWARD_ID_TAG, forward_id)


async def test_an_envelope_sent_again_under_its_forward_id_is_answered_as_before_and_applied_once(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            controller = cluster.controller
            broker = await cluster.start_broker(103, "3.7")  # a topic needs a broker to live on
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            inner = encode_request(CREATE_TOPICS, CREATE_TOPICS_VERSION, 7, "client-a", create_topics_body("once"))
            forward_id = os.urandom(16)
            async with await KafkaClient.connect("127.0.0.1", cluster.controller_port) as client:
                first = await client.request(ENVELOPE_KEY, 0, envelope(inner, forward_id))
                offset_after_first = controller.state.last_applied_offset
                # The answer was lost on the way back, say: the broker sends it again.
                again = await client.request(ENVELOPE_KEY, 0, envelope(inner, forward_id))
                # A different request for the same topic is a different write.
                other = await client.request(ENVELOPE_KEY, 0, envelope(inner, os.urandom(16)))
                plain = await client.request(ENVELOPE_KEY, 0, envelope(inner, None))
            assert first.error_code == again.error_code == ErrorCode.NONE
            assert bytes(again.response_data) == bytes(first.response_data)
            topic = decode_response(CREATE_TOPICS, CREATE_TOPICS_VERSION, bytes(first.response_data))[1].topics[0]
            assert (topic.name, topic.error_code, topic.num_partitions) == ("once", ErrorCode.NONE, 2)
            for refused in (other, plain):
                answer = decode_response(CREATE_TOPICS, CREATE_TOPICS_VERSION, bytes(refused.response_data))[1]
                assert answer.topics[0].error_code == TopicErrorCode.TOPIC_ALREADY_EXISTS
            # Nothing was written for the repeat: no new records past the first write
            # (the refused ones write nothing either).
            assert controller.state.last_applied_offset == offset_after_first
            assert controller.state.topic("once").topic_id == topic.topic_id
            # The controller says how far its image was when it answered; Kafka's own
            # Envelope (no forward id) gets no such field.
            assert decode_offset(tagged(first, COMMITTED_OFFSET_TAG)) == offset_after_first
            assert tagged(plain, COMMITTED_OFFSET_TAG) is None


async def test_a_write_through_a_broker_is_in_that_brokers_image_when_answered(tmp_path):
    with trio.fail_after(TIMEOUT_S):
        async with running_cluster(tmp_path, MV_3_7_IV4) as cluster:
            broker = await cluster.start_broker(103, "3.7")
            await broker.lifecycle.wait_state(BrokerState.RUNNING)
            async with await KafkaClient.connect("127.0.0.1", broker.port) as client:
                for index in range(20):
                    name = f"ryw-{index}"
                    reply = await client.request(CREATE_TOPICS, CREATE_TOPICS_VERSION, create_topics_body(name))
                    assert reply.topics[0].error_code == ErrorCode.NONE
                    # No wait: the broker answered only once its image had the topic.
                    assert broker.state.topic(name) is not None
                    metadata = await client.request(METADATA, METADATA_VERSION, {
                        "topics": [{"name": name}], "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
                    assert metadata.topics[0].error_code == ErrorCode.NONE
                    assert len(metadata.topics[0].partitions) == 2
