"""The `kraftwerk` command and what it drives: the local cluster, the upgrade and
migration stories. The server never imports this package; it runs the server's
nodes as processes (`python -m cli.main controller ...`)."""
