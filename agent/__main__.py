"""`python -m gpuagent` and the `gpuagent` command (both enter at ``entry``)."""

import sys


def entry() -> None:
    try:
        from gpuagent.cli import main
    except KeyboardInterrupt:  # Ctrl-C while the command line is still being imported
        import os

        print("gpuagent: interrupted", file=sys.stderr, flush=True)
        os._exit(130)  # as gpuagent.cli.exit_interrupted, which may not be importable yet
    main()


if __name__ == "__main__":
    entry()
