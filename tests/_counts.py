"""What the reliability tests did (kills, documents checked, queries against
the oracle ...), counted in each process that runs tests and printed once at
the end of the run (see tests/reliability/NOTES.md)."""

from __future__ import annotations

from collections import Counter

COUNTS: Counter[str] = Counter()
