"""pa-bridge: the daemon between a pharmacy dispensing system and the PA service."""

__version__ = "0.1.0"
