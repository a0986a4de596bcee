"""``python -m perfkit``: the same command line as ``perfkit``."""

from perfkit.app.cli.main import main

if __name__ == "__main__":
    main()
