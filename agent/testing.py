"""pytest fixtures for plugin authors (being written by the simulator engineer)."""
