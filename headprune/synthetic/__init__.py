"""The theory experiment: two tasks with conflicting features, a small attention model, and the heads to find.

The research behind headprune proves that a multi-head softmax-attention model trained by gradient descent
from small random initialisation on two tasks whose useful features conflict concentrates the conflicting
feature in particular heads, and that ablating them improves one task and harms the other although
training reached the joint objective's optimum. This package reproduces that setting so the heads
responsible are known independently of ``find``:

- :mod:`~headprune.synthetic.data`: the two tasks (copy-first and not-last) and the joint optimum;
- :mod:`~headprune.synthetic.model`: a one-layer attention-only GPT-2 and its word-level tokenizer;
- :mod:`~headprune.synthetic.train`: gradient descent on the exact joint objective (float64, the same on every
  CPU), with snapshots;
- :mod:`~headprune.synthetic.analysis`: per-head direct logit attribution, the heads that carry the conflict;
- :mod:`~headprune.synthetic.experiment`: one seed end to end (train, analyse, find, export);
- :mod:`~headprune.synthetic.report`: figures and the comparison report. Entry point: ``scripts/theory.py``.
"""
