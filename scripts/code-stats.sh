#!/usr/bin/env bash
# Code-shape counts (unsafe blocks, long functions, long files) from the
# tracked sources; see scripts/code-stats.py. `--list` names each item.
exec python3 "$(dirname "$0")/code-stats.py" "$@"
