"""kraftwerk's server side: networking, request handlers, the controller, storage.

Rules kept here: `protocol/` never imports this package; the cores under
`server/controller/` (and the other sans-I/O cores) never import trio or
sockets, only the thin shells around them do.
"""
