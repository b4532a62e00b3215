"""Fathom: semantic code search for MCP clients, with inference on a fleet of local GPU
sidecars and OpenRouter, under one compatibility gate and one cloud budget."""

__version__ = "0.1.0"
