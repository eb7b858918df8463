"""Evaluation: score a task on a model example by example, with any heads ablated."""

from headprune.evaluation.evaluator import DEFAULT_BATCH_SIZE, Evaluator, evaluate
from headprune.evaluation.results import EvalResult, ExampleResult, Summary

__all__ = ["DEFAULT_BATCH_SIZE", "EvalResult", "Evaluator", "ExampleResult", "Summary", "evaluate"]
