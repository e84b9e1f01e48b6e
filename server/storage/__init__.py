"""Local durable state of a node: the metadata log segments and meta.properties.

Owns nothing itself; re-exports the public names of `log` and `meta_properties`.
Everything here is synchronous file I/O, called from trio through
`trio.to_thread.run_sync`.
"""

from server.storage.log import (
    BatchRejectedError,
    CorruptLogError,
    LogClosedError,
    LogConfig,
    LogFailedError,
    MetadataLog,
    OffsetOutOfRangeError,
    segment_file_name,
)
from server.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    parse_uuid_string,
    random_uuid_string,
    read_meta_properties,
    uuid_to_string,
    write_meta_properties,
)

__all__ = [
    "BatchRejectedError",
    "CorruptLogError",
    "LogClosedError",
    "LogConfig",
    "LogFailedError",
    "MetaProperties",
    "MetaPropertiesError",
    "MetadataLog",
    "OffsetOutOfRangeError",
    "parse_uuid_string",
    "random_uuid_string",
    "read_meta_properties",
    "segment_file_name",
    "uuid_to_string",
    "write_meta_properties",
]
