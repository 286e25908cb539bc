"""The host's own CLI commands (run, plugins, config)."""
