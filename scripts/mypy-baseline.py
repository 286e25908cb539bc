"""Judge a mypy report against .ci/mypy-baseline.txt, the errors still to fix: a report line not in
the baseline fails (the baseline only shrinks), a baseline line mypy no longer reports is named so
it is deleted (that fails too, so the file stays the list of what is left). Lines are compared without their line numbers (an edit above an error moves it).

python scripts/mypy-baseline.py REPORT [--write]   (--write: the baseline becomes REPORT's errors)
"""

import re
import sys
from collections import Counter
from pathlib import Path

BASELINE = Path(__file__).resolve().parent.parent / ".ci" / "mypy-baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\s]+):\d+(?::\d+)?: error: (?P<message>.*)$")


def errors(lines: list[str]) -> Counter[str]:
    """The report's errors as 'path: message' (notes and the summary line left out)."""
    found: Counter[str] = Counter()
    for line in lines:
        match = ERROR.match(line)
        if match:
            found[f"{match['path']}: {match['message']}"] += 1
    return found


def main(argv: list[str]) -> int:
    report = Path(argv[0]).read_text().splitlines()
    found = errors(report)
    if "--write" in argv[1:]:
        header = "# mypy errors left to fix, without line numbers (scripts/mypy.sh); this list only shrinks\n"
        BASELINE.write_text(header + "".join(f"{key}\n" for key in sorted(found.elements())))
        print(f"mypy baseline: {sum(found.values())} errors written to {BASELINE.name}")
        return 0
    known = Counter(line for line in BASELINE.read_text().splitlines() if line and not line.startswith("#"))
    new = found - known
    gone = known - found
    for key in sorted(gone):
        print(f"mypy baseline: fixed, delete from .ci/mypy-baseline.txt: {key}")
    for line in report:
        match = ERROR.match(line)
        if match and new[f"{match['path']}: {match['message']}"] > 0:
            print(line)
    if new or gone:
        print(f"mypy: {sum(new.values())} errors not in .ci/mypy-baseline.txt, {sum(gone.values())} fixed (above)")
        return 1
    print(f"mypy: no new errors ({sum(found.values())} known in .ci/mypy-baseline.txt, to fix)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
