"""KRaft consensus for the `__cluster_metadata` log: the sans-I/O core (core.py), the log view it
reads (log.py), the RPC bodies it speaks (messages.py) and the quorum-state store (quorum_state.py)."""
