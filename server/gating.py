"""Gating API versions on the finalized metadata.version, and version negotiation.

Owns: `GATES` (a read-only view of which request versions need which
metadata.version level; each API's gate is its entry in the API catalog,
server/api/catalog.py), `min_metadata_version`, `max_allowed_version`, `gated_ranges`
(the served {api_key: (min, max)} table cut down to what the cluster's metadata.version
allows), `AdvertisedApis` (a node's served table so gated, what ApiVersions lists and
the dispatcher accepts), `describe_gates` (the gates as text), `negotiate` (the
highest version two sides share, for clients after ApiVersions) and
`gated_version_message` (why a version told earlier is refused now).

KIP-778 asks a controller to hold back a new RPC version "until the controller can
persist the new record type": a request version carrying a field (log dirs, a
previous broker epoch, ...) is only useful once the records that store it may be
written. Apache Kafka never shipped this gating; kraftwerk does, so a broker of a new
release talking to a cluster still finalized at an old metadata.version negotiates
down to a version whose fields the cluster can keep.

Rules kept here:
- The gates are data in the catalog. An API or version not listed is not gated.
- Gates are monotone per API: if vN needs level L, every higher version needs at
  least L (tests check this on the table). A version above the highest listed one
  inherits the highest listed gate, so a newer version is never less gated.
- An unknown metadata.version (`mv_level` None: not bootstrapped yet) gates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from server.api.catalog import CATALOG, ServedApi, gate_runs
from server.controller.features import metadata_version_from_level


@dataclass(frozen=True, slots=True)
class ApiGate:
    """The gated versions of one API: `needs[version]` is the metadata.version level
    that version needs. Versions below the lowest listed one need nothing."""

    api_name: str
    needs: Mapping[int, int]


GATES: Mapping[int, ApiGate] = MappingProxyType(
    {key: ApiGate(spec.name, spec.gate) for key, spec in CATALOG.items() if spec.gate})


def min_metadata_version(api_key: int, version: int) -> int | None:
    """The metadata.version level `version` of `api_key` needs, or None if not gated."""
    gate = GATES.get(api_key)
    if gate is None:
        return None
    listed = [gated for gated in gate.needs if gated <= version]
    if not listed:
        return None
    return gate.needs[max(listed)]


def _allowed(api_key: int, version: int, mv_level: int) -> bool:
    needed = min_metadata_version(api_key, version)
    return needed is None or mv_level >= needed


def max_allowed_version(api_key: int, min_version: int, max_version: int, mv_level: int | None) -> int | None:
    """The highest version in [min_version, max_version] allowed at `mv_level`
    (None: not bootstrapped, nothing gated), or None when not even `min_version` is."""
    if min_version > max_version:
        return None
    if mv_level is None:
        return max_version
    # Gates are monotone, so the first allowed version from the top is the answer and
    # every version below it is allowed too.
    for version in range(max_version, min_version - 1, -1):
        if _allowed(api_key, version, mv_level):
            return version
    return None


def gated_ranges(ranges: Mapping[int, tuple[int, int]], mv_level: int | None) -> dict[int, tuple[int, int]]:
    """`ranges` ({api_key: (min, max)}) with every max lowered to what `mv_level`
    allows; APIs left with no allowed version are dropped."""
    result: dict[int, tuple[int, int]] = {}
    for api_key, (min_version, max_version) in ranges.items():
        allowed = max_allowed_version(api_key, min_version, max_version, mv_level)
        if allowed is not None:
            result[api_key] = (min_version, allowed)
    return result


class AdvertisedApis:
    """The versions a node advertises in ApiVersions and accepts now: its served table
    gated by the finalized metadata.version (KIP-778). Recomputed only when
    metadata.version changes (not on every feature change), so the per-request check
    is a dict lookup."""

    _UNSET = object()

    def __init__(self, served: Mapping[int, ServedApi]) -> None:
        self._ranges = {api.api_key: (api.min_version, api.max_version) for api in served.values()}
        self._metadata_version: object = self._UNSET
        self._current: dict[int, tuple[int, int]] = dict(self._ranges)

    def current(self, metadata_version: int | None) -> dict[int, tuple[int, int]]:
        if metadata_version != self._metadata_version:
            self._current = gated_ranges(self._ranges, metadata_version)
            self._metadata_version = metadata_version
        return self._current


def describe_gates() -> list[str]:
    """One line per run of versions with the same gate, e.g.
    `BrokerRegistration v2+ needs metadata.version 3.7-IV2 (17)`."""
    lines = []
    for gate in GATES.values():
        for shown, level in gate_runs(gate.needs):
            mv = metadata_version_from_level(level)
            lines.append(f"{gate.api_name} {shown} needs metadata.version {mv.name} ({level})")
    return lines


def gated_version_message(api_key: int, api_name: str, version: int) -> str:
    """The message of the UNSUPPORTED_VERSION answer to a request whose version the
    connection's ApiVersions allowed but a later metadata.version change gated away."""
    needed = min_metadata_version(api_key, version)
    needs = (f"needs metadata.version {metadata_version_from_level(needed).name} ({needed}) or higher"
             if needed is not None else "is not allowed")
    return (f"{api_name} v{version} {needs}: the finalized metadata.version changed since this "
            "connection's ApiVersions; ask ApiVersions again (or reconnect) and use a version it lists")


def negotiate(local: tuple[int, int], remote: tuple[int, int]) -> int | None:
    """The highest version both (min, max) ranges contain, or None if they are disjoint."""
    low = max(local[0], remote[0])
    high = min(local[1], remote[1])
    return high if low <= high else None
