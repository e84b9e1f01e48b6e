"""One module per API: a decoded request in, a response body (dict) out.

Read handlers are synchronous and read the controller's committed state;
write handlers are `async` and submit a command to the single-writer
controller loop, returning only once its records are durable.
"""
