"""Total the `units` column of a sales CSV per region, largest first."""

import csv
import sys
from collections import Counter


def main(path: str) -> int:
    totals: Counter[str] = Counter()
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            totals[row["region"]] += int(row["units"])
    grand = sum(totals.values())
    print(f"total {grand} units across {len(totals)} regions")
    for region, units in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{region} {units} {units * 100 // grand}%")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: summarize.py FILE.csv", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
