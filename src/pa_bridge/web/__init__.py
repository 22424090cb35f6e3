"""Thin Flask layers over the use cases in :mod:`pa_bridge.service`."""
