"""Models: where a model comes from, and what its folder says of itself (the card)."""
