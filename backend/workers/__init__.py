"""The ranks' side of a worker group, the torchrun program: ``worker`` is its entry point and manual.
The app's side and the wire are ``backend.launch``."""
