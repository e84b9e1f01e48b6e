"""Broker registrations in the image share equal immutable values: the features mapping
of registrations with the same ranges, and the endpoint / log-directory tuples a
re-registration repeats. Sharing must never be visible as anything but fewer objects:
the values, the image's equality, its snapshot bytes and what a reader sees stay those
of registrations built one by one."""

from __future__ import annotations

import uuid

from protocol import metadata_records as mr
from protocol.records import decode_metadata_record, encode_metadata_record, record
from server.controller.features import SupportedRange
from server.controller.snapshot import encode_snapshot_records, load_snapshot
from server.controller.state import BrokerEndpoint, ControllerState

FEATURES = [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 19},
            {"name": "kraft.version", "min_supported_version": 0, "max_supported_version": 1}]


def registration(broker_id: int, incarnation: uuid.UUID, epoch: int, *, port: int = 9092, log_dirs=(),
                 features=FEATURES, version: int = 3):
    data = {"broker_id": broker_id, "incarnation_id": incarnation, "broker_epoch": epoch,
            "end_points": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": port, "security_protocol": 0}],
            "features": features, "rack": None, "fenced": True, "in_controlled_shutdown": False,
            "log_dirs": list(log_dirs)}
    # Decoded as a node replays it (the decoder's Container, not the dict).
    return decode_metadata_record(encode_metadata_record(record(mr.REGISTER_BROKER_RECORD, data, version)))


def test_registrations_with_the_same_ranges_share_one_features_mapping():
    state = ControllerState("c")
    state.replay(registration(1, uuid.uuid4(), 0), 0)
    state.replay(registration(2, uuid.uuid4(), 1, port=9093), 1)
    other = [dict(f) for f in FEATURES]
    other[0]["max_supported_version"] = 18
    state.replay(registration(3, uuid.uuid4(), 2, port=9094, features=other), 2)
    first, second, third = (state.broker(i) for i in (1, 2, 3))
    assert first.supported_features is second.supported_features
    assert third.supported_features is not first.supported_features
    assert dict(first.supported_features) == {"metadata.version": SupportedRange(1, 19),
                                              "kraft.version": SupportedRange(0, 1)}
    assert third.supported("metadata.version") == SupportedRange(1, 18)
    assert third.supported("unknown.feature") == SupportedRange(0, 0)


def test_a_repeated_feature_name_keeps_its_last_range_as_a_dict_would():
    state = ControllerState("c")
    features = FEATURES + [{"name": "metadata.version", "min_supported_version": 2, "max_supported_version": 7}]
    state.replay(registration(1, uuid.uuid4(), 0, features=features), 0)
    assert state.broker(1).supported("metadata.version") == SupportedRange(2, 7)


def test_a_re_registration_keeps_the_tuples_it_repeats_and_takes_the_ones_it_changes():
    incarnation, directory = uuid.uuid4(), uuid.uuid4()
    state = ControllerState("c")
    state.replay(registration(1, incarnation, 0), 0)
    before = state.broker(1)
    state.replay(registration(1, incarnation, 0, log_dirs=[directory]), 1)
    after = state.broker(1)
    assert after.endpoints is before.endpoints  # the same listener: kept
    assert after.log_dirs == (directory,) and after.registration_offset == 1
    state.replay(registration(1, incarnation, 0, log_dirs=[directory]), 2)
    assert state.broker(1).log_dirs is after.log_dirs
    state.replay(registration(1, incarnation, 0, port=9999, log_dirs=[directory]), 3)
    moved = state.broker(1)
    assert moved.endpoints == (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9999, 0),)
    assert state.directory_owner(directory) == 1


def test_shared_values_leave_the_image_equal_to_one_built_without_sharing():
    incarnations = [uuid.uuid4() for _ in range(4)]
    directories = [uuid.uuid4() for _ in range(4)]
    log = [registration(10 + i, incarnations[i], i, port=9000 + i) for i in range(4)]
    log += [registration(10 + i, incarnations[i], i, port=9000 + i, log_dirs=[directories[i]]) for i in range(4)]
    shared = ControllerState("c")
    for offset, item in enumerate(log):
        shared.replay(item, offset)
    # The same registrations, each replayed into an image of its own (nothing to share with).
    alone = ControllerState("c")
    for offset, item in enumerate(log):
        single = ControllerState("c")
        single.replay(item, offset)
        alone._image.brokers[item.data["broker_id"]] = single.broker(item.data["broker_id"])
        alone._image.directory_owners.update(single._image.directory_owners)
        alone._last_applied_offset = offset
    assert shared == alone
    assert [r.value for r in encode_snapshot_records(shared)] == [r.value for r in encode_snapshot_records(alone)]
    loaded = load_snapshot(encode_snapshot_records(shared), shared.last_applied_offset + 1, "c")
    assert loaded == shared


def test_a_snapshot_encodes_each_registrations_own_features_however_they_are_shared():
    """The snapshot encodes a features mapping once per snapshot and reuses the bytes for
    every registration holding that same mapping: registrations with other ranges (other
    mappings) still get their own."""
    from server.controller.snapshot import register_broker_record_value

    state = ControllerState("c")
    ranges = [FEATURES, FEATURES[:1], [], FEATURES, [dict(FEATURES[0], max_supported_version=7)]]
    for offset, features in enumerate(ranges):
        state.replay(registration(20 + offset, uuid.uuid4(), offset, port=9100 + offset, features=features), offset)
    values = [r.value for r in encode_snapshot_records(state)]
    expected = [register_broker_record_value(state.broker(20 + i), state.metadata_version) for i in range(len(ranges))]
    assert values == expected
    assert state.broker(20).supported_features is state.broker(23).supported_features
