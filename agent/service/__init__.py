"""The running agent: building it from a config, the scheduler, the daemon and its systemd
notifications, logging, liveness, the state file, and what collectors share each cycle."""
