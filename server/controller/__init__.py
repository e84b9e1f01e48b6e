"""The KRaft controller: feature catalog, replayed metadata image, pure commands.

Owns the controller's sans-I/O core:
- `features`: metadata.version and the other feature flags, with Kafka's levels.
- `state`: `ControllerState`, the metadata image rebuilt only by `replay`, and the
  volatile `BrokerHeartbeatTracker` that is deliberately kept out of it.
- `commands`: pure functions from (state, request) to `ControllerResult`.

Rules kept here: nothing in this package does I/O or reads the clock; commands
never mutate state; the single-writer loop appends a result's records, then
replays them, so leader, standby and restart share one mutation path.
"""
