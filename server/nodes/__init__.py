"""The node kinds a process runs (controller, broker agent, ZooKeeper-mode broker)
and what they share: serving a listener, start-up, the metadata image they replay."""
