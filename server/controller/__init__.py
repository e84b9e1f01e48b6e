"""The KRaft controller: feature catalog, replayed metadata image, pure commands.

Owns the controller's sans-I/O core:
- `features`: metadata.version and the other feature flags, with Kafka's levels;
  `downgrade`: what a lossy metadata.version downgrade drops.
- `state`: `ControllerState`, the metadata image rebuilt only by `replay`, and the
  volatile `BrokerHeartbeatTracker` that is deliberately kept out of it.
- `commands` (features, brokers), `topics`, `acl_commands`, `scram_commands`: pure
  functions from (state, request) to `ControllerResult`.
And what surrounds it: `snapshot` (the image as snapshot files, start-up recovery),
`loop` (the single writer) and `replayer` (committed batches into the image).

Rules kept here: the core modules do no I/O and read no clock (time comes in as
`now_ms`); commands never mutate state; the single-writer loop appends a result's
records, then replays them, so leader, standby and restart share one mutation path.
"""
