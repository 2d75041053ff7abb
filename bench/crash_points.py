"""The full crash-point suite (issue 12): every single crash point and every pair (a
crash, then a crash of the resuming process at each point it reaches) of the three
reference sessions in tests/orchestrator/crashpoints.py. Prints the scenario count and
the three counts that must be zero. CI runs every single point and a sample of pairs.

    .venv/bin/python bench/crash_points.py [--kinds sequential,parallel,approval]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bench/eventlog.py must not shadow the eventlog package when run as a script.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def load_harness():  # type: ignore[no-untyped-def]
    path = HERE.parent / "tests" / "orchestrator" / "crashpoints.py"
    spec = importlib.util.spec_from_file_location("crashpoints", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["crashpoints"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="sequential,parallel,approval")
    parser.add_argument(
        "--fleet", action="store_true", help="every process a worker taking over by lease"
    )
    args = parser.parse_args()
    harness = load_harness()
    start = time.monotonic()
    last = [start]

    def progress(tally) -> None:  # type: ignore[no-untyped-def]
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            print(f"  ... {tally.line()}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        tally = harness.run_suite(Path(tmp), args.kinds.split(","), double=True, progress=progress)
    print(tally.line())
    print(
        f"({tally.unreached} crash points were past the end of their run; "
        f"{time.monotonic() - start:.0f} s)"
    )
    for failure in tally.failures[:20]:
        print("FAIL", failure)
    return 0 if not tally.failures else 1


if __name__ == "__main__":
    sys.exit(main())
