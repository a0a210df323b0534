"""Drop ``# noqa`` directives for rules ruff does not run here, keeping a reason as a comment.

``ruff check --fix`` removes such a directive (RUF100) together with the reason written
after it; this keeps ``  # why`` as ``# why`` (a reason after annotation-only
codes, ANN*, explains a missing annotation and goes with it). Run it, then ``ruff check
--fix .``, after merging branches written before the linter was configured:

    python .ci/drop_unrun_noqa.py && ruff check --fix . && ruff check .
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

#: Rule prefixes pyproject.toml's [tool.ruff.lint] selects (RUF100 is not a noqa target).
RUN = re.compile(r"^(E|F|W|I)\d")
DIRECTIVE = re.compile(r"(\s*)# noqa: ([A-Z]+\d+(?:,\s*[A-Z]+\d+)*)(?:\s*-\s*(.*))?$")


def clean(line: str) -> str:
    """``line`` without the codes ruff does not run (the whole directive when none is left)."""
    m = DIRECTIVE.search(line)
    if not m:
        return line
    codes = [c.strip() for c in m.group(2).split(",")]
    run, reason, head = [c for c in codes if RUN.match(c)], m.group(3), line[: m.start()]
    if len(run) == len(codes):
        return line
    if run:
        return f"{head}{m.group(1)}# noqa: {', '.join(run)}" + (f" - {reason}" if reason else "")
    if reason and not all(c.startswith("ANN") for c in codes):
        return f"{head}  # {reason}"
    return head.rstrip()


def main() -> int:
    files = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, check=True).stdout.split()
    changed = 0
    for name in files:
        path = Path(name)
        lines = path.read_text().split("\n")
        cleaned = [clean(line) for line in lines]
        if cleaned != lines:
            changed += sum(a != b for a, b in zip(lines, cleaned))
            path.write_text("\n".join(cleaned))
    print(f"{changed} noqa line(s) cleaned")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
