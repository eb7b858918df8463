"""find's own search code on counts-only models: how often it is wrong, and how often right, in seconds.

``counts`` is the model (heads that toggle the correctness of random examples; no weights, no forward pass); the
objectives run through exactly what ``find`` runs on it: ``improve`` (under find's selection rule or any other
registered one, ``headprune.search.rules``), ``guards`` (find with a guard task) and ``compress``. scripts/passengers.py,
scripts/guard_rates.py and the suite read their figures from here.
"""

from __future__ import annotations

from headprune.search.simulation.counts import (CountsConditions, CountsModel, CountsResult, CountsSplit, Rates,
                                                true_change)
from headprune.search.simulation.improve import (FAMILIES, LUCKY_NULL, MASKED, Outcome, family, run_improve,
                                                 run_masked)

__all__ = ["FAMILIES", "LUCKY_NULL", "MASKED", "CountsConditions", "CountsModel", "CountsResult", "CountsSplit",
           "Outcome", "Rates", "family", "run_improve", "run_masked", "true_change"]
