"""The benchmarks, one module each, run from the repository root as ``python -m scripts.bench.NAME``: ``kinds``
(the exact screen against a practitioner's naive loop, every task kind), ``screen`` (each fast path alone),
``export`` (deployment speed of pruned exports), ``compress`` (the compress search's cost), ``determinism`` (the
determinism check's spread), ``distributed`` (data-parallel find), ``sandbox`` (the code runner's isolation),
``export_memory`` (an export's peak memory) and ``gpu_check`` (a GPU at real model shapes: its parts in
``gpu_parts`` and ``gpu_export``, ``--protocol`` in ``protocol``; ``gpu_targets`` reads its records against the GPU
targets). Each writes a JSON record (``--json PATH``, default ``runs/bench/NAME.json``; helpers in ``common``);
``render`` makes markdown tables of them, and docs/benchmarks.md's tables are rendered from the records in
docs/bench/.
"""
