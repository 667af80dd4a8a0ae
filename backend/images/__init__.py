"""What the app writes: the output folder (only its own PNGs, the newest kept) and the PNGs with their parameters."""
