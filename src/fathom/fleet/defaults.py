"""Defaults the fleet's command line shows and its agent uses, in a module light enough for the
CLI to import without the agent."""

# Check the key's limits every five minutes while a key is held (`fathom sidecar
# --key-check-interval`): credits drain and limits get changed on openrouter.ai.
DEFAULT_INTERVAL_S = 300.0
