"""The simulated PA service (being written)."""
