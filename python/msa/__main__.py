"""``python -m msa <command>``: ``plot`` draws the plots of an ``msa run --report`` file."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    usage = "usage: python -m msa plot REPORT.json -o OUT.png|OUT.svg"
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "plot":
        from . import plot

        return plot.main(argv[1:])
    print(f"python -m msa: unknown command '{argv[0]}'\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
