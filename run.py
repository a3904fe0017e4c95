"""Main entry: ``python run.py [scenario=NAME] [key=value ...]`` (the same as ``sifl run``)."""

import sys

from sifl_ray.cli import entry

if __name__ == "__main__":
    sys.exit(entry(["run", *sys.argv[1:]]))
