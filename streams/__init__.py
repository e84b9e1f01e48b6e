"""Kafka Streams' version-probing rebalance (KIP-268): the pure assignor, a
trio group-rebalance runner that drives it, and the KIP's upgrade matrix."""
