"""Programs per second through the code runner, behind each isolation this machine offers.

    python -m scripts.bench.sandbox [--n 60] [--runner OLD_EXECUTION_PY] [--json runs/bench/sandbox.json]

Each round runs a HumanEval-style program that passes and one that fails an assertion (what code tasks run per
example). ``--runner`` times another ``execution.py`` instead (e.g. the one before the sandbox:
``git show 841a86f:headprune/scoring/execution.py > /tmp/old_execution.py``), with its own default isolation.
Timings depend on the load: run it alone (``flock /tmp/headprune-heavy.lock``) and quote ``uptime`` beside them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from .common import add_json_option, best_of, write_json

PASSING = "def add(a, b):\n    return a + b\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n\n\ncheck(add)\n"
FAILING = "def add(a, b):\n    return a - b\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n\n\ncheck(add)\n"


def rate(run, n: int) -> float:  # noqa: ANN001
    """Programs per second over ``n`` rounds of a passing and a failing program (after one unmeasured round)."""
    def rounds() -> None:
        for _ in range(n):
            assert run(PASSING).passed and not run(FAILING).passed

    assert run(PASSING).passed and not run(FAILING).passed
    return 2 * n / best_of(rounds, runs=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=60, help="rounds (two programs each)")
    parser.add_argument("--runner", default=None, help="another execution.py to time instead")
    add_json_option(parser, "sandbox")
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    if args.runner:
        spec = importlib.util.spec_from_file_location("old_execution", args.runner)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        with module.permit_code_execution():
            rows = [{"runner": args.runner, "programs_per_s": rate(module.run_program, args.n)}]
        print(f"{args.runner}: {rows[0]['programs_per_s']:.1f} programs/s")
        write_json(args.json, "sandbox", args, rows)
        return
    from headprune.scoring import execution, sandbox

    rows = []
    with execution.permit_code_execution():
        best = sandbox.best_isolation()
        for isolation in sandbox.candidates():
            if sandbox.launch(sandbox.PROBE, isolation, time_limit_s=10, memory_bytes=1 << 30)[0] != 0:
                continue
            mark = " (chosen)" if isolation == best else ""
            run = lambda source, isolation=isolation: execution.run_program(source, isolation=isolation)  # noqa: E731
            rows.append({"isolation": isolation.describe(), "chosen": isolation == best,
                         "programs_per_s": rate(run, args.n)})
            print(f"{isolation.describe()}{mark}: {rows[-1]['programs_per_s']:.1f} programs/s")
    write_json(args.json, "sandbox", args, rows)


if __name__ == "__main__":
    main()
