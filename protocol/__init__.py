"""kraftwerk's Kafka wire protocol: pure construct schemas, no I/O.

This package never imports `server/` or `pipeline/`.
"""
