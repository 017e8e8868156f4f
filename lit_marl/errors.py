"""Errors lit-marl raises for bad input; the CLI prints them without a traceback (exit code 2)."""


class ConfigError(ValueError):
    """A configuration value that is not allowed; the message names the field, the value and what is allowed."""


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used (missing, truncated, or from another algorithm or task)."""
