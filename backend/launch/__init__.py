"""Launching worker processes from the app: the group's state machine and its processes (group), its
calls to rank 0 (calls), the wire both sides speak (protocol), why a group died (deaths)."""
