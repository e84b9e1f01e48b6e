"""Networking: sans-I/O framing and the trio listener (the only socket code)."""
