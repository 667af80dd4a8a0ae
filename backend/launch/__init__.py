"""Launching worker processes from the app: the group's state machine, its processes and why it died
(group), its calls to rank 0 (calls), the wire both sides speak (protocol)."""
