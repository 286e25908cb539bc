"""Errors that reach the user as one line, without a traceback."""


class AgentError(Exception):
    """A problem the user can fix; the CLI prints str(exc) alone and exits 1."""

    exit_code = 1


class ConfigError(AgentError):
    """A configuration file or table that fails validation."""


class NvmlUnavailable(AgentError):
    """No NVIDIA driver / libnvidia-ml could be loaded."""
