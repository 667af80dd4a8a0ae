"""Warm-start bundles: the compile caches of one install, carried to another and checked against it."""
