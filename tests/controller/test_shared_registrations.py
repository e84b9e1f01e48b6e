"""Images in one process share the registration a committed RegisterBrokerRecord
describes (server/controller/state.py `SharedRegistrations`): the same record at the
same offset gives every image one immutable value, and anything else gives each its
own. Sharing must never show as anything but fewer objects: every image equals, value
for value, the one built without the cache."""

from __future__ import annotations

import uuid

from hypothesis import given, settings, strategies as st

from protocol import metadata_records as mr
from protocol.records import decode_metadata_record, encode_metadata_record, record
from server.controller import state as state_module
from server.controller.snapshot import encode_snapshot_records, load_snapshot
from server.controller.state import (
    ControllerState,
    SharedRegistrations,
    _mapping_registration,
    _registration_matches,
)

FEATURES = [{"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 19},
            {"name": "kraft.version", "min_supported_version": 0, "max_supported_version": 1}]


def registration_data(broker_id: int, incarnation: uuid.UUID, epoch: int, **changes) -> dict:
    data = {"broker_id": broker_id, "incarnation_id": incarnation, "broker_epoch": epoch,
            "end_points": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092, "security_protocol": 0}],
            "features": FEATURES, "rack": None, "fenced": True, "in_controlled_shutdown": False,
            "log_dirs": []}
    data.update(changes)
    return data


def decoded(data: dict, version: int = 3):
    """The record as a node replays it (the decoder's Container)."""
    return decode_metadata_record(encode_metadata_record(record(mr.REGISTER_BROKER_RECORD, data, version)))


def test_images_replaying_the_same_record_hold_one_value():
    incarnation, directory = uuid.uuid4(), uuid.uuid4()
    images = [ControllerState("c") for _ in range(3)]
    first = decoded(registration_data(7, incarnation, 0))
    again = decoded(registration_data(7, incarnation, 0, log_dirs=[directory]))
    for image in images:
        # Each node decodes its own copy of the bytes.
        image.replay(decoded(registration_data(7, incarnation, 0)), 40)
        image.replay(decoded(registration_data(7, incarnation, 0, log_dirs=[directory])), 41)
    values = [image.broker(7) for image in images]
    assert values[0] is values[1] is values[2]
    assert values[0] == _mapping_registration(again.data, 41)
    assert values[0].registration_offset == 41 and values[0].log_dirs == (directory,)
    assert all(image.directory_owner(directory) == 7 for image in images)
    assert _mapping_registration(first.data, 40) != values[0]


def test_a_different_record_at_the_same_offset_builds_its_own_value():
    incarnation = uuid.uuid4()
    base = registration_data(8, incarnation, 3)
    variants = [
        {"broker_epoch": 4}, {"incarnation_id": uuid.uuid4()}, {"rack": "r1"}, {"fenced": False},
        {"in_controlled_shutdown": True},
        {"end_points": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9093, "security_protocol": 0}]},
        {"end_points": [{"name": "SSL", "host": "127.0.0.1", "port": 9092, "security_protocol": 1}]},
        {"end_points": []},
        {"features": FEATURES[:1]},
        {"features": [dict(FEATURES[0], max_supported_version=18), FEATURES[1]]},
        {"features": FEATURES + [dict(FEATURES[0], min_supported_version=2)]},  # a repeated name
        {"log_dirs": [uuid.uuid4()]},
        {"cordoned_log_dirs": []},
    ]
    for variant in variants:
        held = ControllerState("c")
        held.replay(decoded(registration_data(8, incarnation, 3), version=4), 50)
        other = ControllerState("c")
        changed = decoded(dict(base, **variant), version=4)
        other.replay(changed, 50)
        assert other.broker(8) is not held.broker(8), variant
        assert other.broker(8) == _mapping_registration(changed.data, 50), variant
        assert other.broker(8) != held.broker(8), variant


def test_the_window_is_bounded_and_cleared_whole():
    shared = SharedRegistrations(max_entries=4)
    incarnation = uuid.uuid4()
    records = [decoded(registration_data(1, incarnation, 0)).data for _ in range(6)]
    values = [_mapping_registration(data, offset) for offset, data in enumerate(records)]
    for value in values:
        shared.put(value)
    # Full after four: the fifth cleared the window, so only the fifth and sixth remain.
    assert [shared.get(data, offset) for offset, data in enumerate(records)] == [None] * 4 + values[4:]


uuids = st.builds(uuid.UUID, st.sampled_from(["00000000-0000-0000-0000-000000000001",
                                              "00000000-0000-0000-0000-000000000002",
                                              "6ba7b810-9dad-11d1-80b4-00c04fd430c8"]))
feature_names = st.sampled_from(["metadata.version", "kraft.version", "group.version"])
registrations = st.fixed_dictionaries({
    "broker_id": st.integers(0, 3),
    "incarnation_id": uuids,
    "broker_epoch": st.integers(0, 2),
    "end_points": st.lists(st.fixed_dictionaries({
        "name": st.sampled_from(["PLAINTEXT", "SSL"]), "host": st.sampled_from(["a", "b"]),
        "port": st.integers(9092, 9093), "security_protocol": st.integers(0, 1)}), max_size=2),
    "features": st.lists(st.fixed_dictionaries({
        "name": feature_names, "min_supported_version": st.integers(0, 1),
        "max_supported_version": st.integers(1, 2)}), max_size=3),
    "rack": st.none() | st.sampled_from(["", "r"]),
    "fenced": st.booleans(),
    "in_controlled_shutdown": st.booleans(),
    "log_dirs": st.lists(uuids, max_size=2),
    "cordoned_log_dirs": st.none() | st.lists(uuids, max_size=2),
})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), registrations), min_size=1, max_size=12))
def test_a_match_is_exactly_an_equal_value(items):
    """For arbitrary pairs of records, the cache's check says "same" only when the value
    the second would build equals the first's, and always then unless the features differ
    in order or repeat a name (such a record is built, never matched); an image replaying
    records through the shared window equals one built record by record."""
    built = [(offset, _mapping_registration(decoded(data, 4).data, offset)) for offset, data in items]
    for offset, data in items:
        data = decoded(data, 4).data
        names = [feature["name"] for feature in data["features"]]
        for other_offset, value in built:
            if other_offset == offset and value.broker_id == data["broker_id"]:
                matches, equal = _registration_matches(value, data), value == _mapping_registration(data, offset)
                assert equal or not matches
                assert matches or not equal or len(set(names)) < len(names) \
                    or names != list(value.supported_features)
    # Offsets must increase in an image: replay in offset order, one record per offset.
    by_offset = dict(items)
    shared, alone = ControllerState("c"), {}
    warm = ControllerState("c")
    for offset in sorted(by_offset):
        warm.replay(decoded(by_offset[offset], 4), offset)
        shared.replay(decoded(by_offset[offset], 4), offset)
        data = decoded(by_offset[offset], 4).data
        alone[data["broker_id"]] = _mapping_registration(data, offset)
    assert dict(shared.brokers) == alone
    assert shared == warm


class NoSharing:
    """An empty window: every registration is built where it is replayed."""

    def get(self, data, offset):
        return None

    def put(self, registration) -> None:
        pass

    def derive(self, offset, source, change, build):
        return build()


def test_snapshot_bytes_held_by_a_registration_are_its_bytes_at_every_level(monkeypatch):
    """A registration keeps the bytes its last snapshot wrote for it; a later snapshot
    at a level that writes another record version, or after the registration changed,
    writes what a freshly built image writes."""
    def level_record(level: int):
        return record(mr.FEATURE_LEVEL_RECORD, {"name": "metadata.version", "feature_level": level})

    directory = uuid.uuid4()
    state = ControllerState("c")
    state.replay(level_record(7), 0)
    for index in range(3):
        state.replay(decoded(registration_data(20 + index, uuid.uuid4(), index + 1), version=1), index + 1)
    offset = 4
    for level in (7, 11, 17, 25, 17, 11):  # record versions 1, 2, 3, 4, then back down
        if level != state.metadata_version:
            state.replay(level_record(level), offset)
            offset += 1
        if level == 17:
            incarnation = state.broker(21).incarnation_id
            state.replay(decoded(registration_data(21, incarnation, 2, log_dirs=[directory]), version=3), offset)
            offset += 1
        first = [entry.value for entry in encode_snapshot_records(state)]
        again = [entry.value for entry in encode_snapshot_records(state)]  # from the held bytes
        with monkeypatch.context() as patched:
            patched.setattr(state_module, "SHARED_REGISTRATIONS", NoSharing())
            fresh = load_snapshot(encode_snapshot_records(state), offset, "c")
        assert all(registration.snapshot_value is None for registration in fresh.brokers.values())
        assert first == again == [entry.value for entry in encode_snapshot_records(fresh)], level


def change_record(broker_id: int, epoch: int, **fields):
    return record(mr.BROKER_REGISTRATION_CHANGE_RECORD, dict({"broker_id": broker_id, "broker_epoch": epoch}, **fields),
                  version=0)


def test_a_fencing_change_of_a_shared_value_is_shared_and_equal_to_one_made_alone(monkeypatch):
    incarnation = uuid.uuid4()
    images = [ControllerState("c") for _ in range(3)]
    steps = [(decoded(registration_data(9, incarnation, 5)), 60),
             (change_record(9, 5, fenced=-1), 61),                        # unfence
             (change_record(9, 5, in_controlled_shutdown=1), 62),         # controlled shutdown
             (record(mr.FENCE_BROKER_RECORD, {"id": 9, "epoch": 5}, version=0), 63),
             (record(mr.UNFENCE_BROKER_RECORD, {"id": 9, "epoch": 5}, version=0), 64)]
    alone = ControllerState("c")
    for item, offset in steps:
        for image in images:
            image.replay(item, offset)
        with monkeypatch.context() as patched:
            patched.setattr(state_module, "SHARED_REGISTRATIONS", NoSharing())
            alone.replay(item, offset)
        values = [image.broker(9) for image in images]
        assert values[0] is values[1] is values[2], offset
        assert values[0] == alone.broker(9) and values[0] is not alone.broker(9), offset
    # An image holding an equal value of its own (not the shared one) derives its own.
    alone.replay(change_record(9, 5, fenced=1), 65)
    images[0].replay(change_record(9, 5, fenced=1), 65)
    assert alone.broker(9) == images[0].broker(9) and alone.broker(9) is not images[0].broker(9)
    assert alone.broker(9).fenced and alone.broker(9).in_controlled_shutdown
    # A change that also names log directories is built where it is replayed.
    directory = uuid.uuid4()
    images[1].replay(change_record(9, 5, log_dirs=[directory]), 65)
    images[2].replay(change_record(9, 5, log_dirs=[directory]), 65)
    assert images[1].broker(9) == images[2].broker(9) and images[1].broker(9).log_dirs == (directory,)
