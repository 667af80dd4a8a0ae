"""A request and its record: validation (once, in the app), the request, the engine's output, the run's record."""
