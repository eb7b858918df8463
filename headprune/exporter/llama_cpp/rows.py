"""Many task rows through one llama.cpp context: the prompt prefix they share is evaluated once, and their own tokens
are decoded side by side, several rows a ``llama_decode`` call.

A task check runs hundreds of examples that begin with the same few-shot prompt. Evaluating each from its first
token, one at a time, spent most of a quantized export's check on that prompt again and again (SmolLM2-135M,
q4_k_m: about 0.6 s an example, 17 minutes for 300 on 2 cores). Here sequence 0 of a context with several sequences
holds the prefix; each row gets its cells with ``llama_memory_seq_cp`` (in a unified key/value buffer the cells are
shared, not copied) and only its tokens after the prefix are decoded, the rows of a group in one batch, and greedy
steps of every row still going in one batch too. The prefix stays in sequence 0 between calls: the next call keeps
the part its rows share, and evaluates only what differs.

A file whose layers carry a recurrent state (a hybrid's Mamba2, convolution or Gated DeltaNet layers) shares its
prefix the same way, the state copied with the keys and values, but that state cannot be taken back to an earlier
position: where the next call's prefix is shorter than the one held, it is evaluated again from its first token.

The numbers are those of each row run alone from its first token, up to float rounding (a token's keys, values and
logits depend only on the tokens before it; llama.cpp may sum in another order in a batch of another size):
``tests/test_llama_cpp_rows.py`` compares answers and logits with and without the shared prefix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from headprune.exporter.llama_cpp.runtime import LlamaCpp

PREFIX = 0  # the sequence that holds the shared prefix; rows use 1, 2, ...


class SharedRows:
    """Rows of tokens scored or decoded greedily in ``llm`` (a :class:`LlamaCpp` with several sequences) on one shared
    prefix, as many at a time as it has sequences besides the prefix's and its cells hold."""

    def __init__(self, llm: LlamaCpp) -> None:
        self.llm = llm
        self.rows = llm.sequences - 1
        self.prefix: list[int] = []  # the tokens sequence 0 holds
        self.prefix_logits: dict[int, np.ndarray] = {}  # position -> its logits, where a row asked for them

    def forget(self) -> None:
        """Clear the context (another caller used sequence 0)."""
        self.llm.reset()
        self.prefix, self.prefix_logits = [], {}

    def _hold(self, tokens: Sequence[int], logits_from: int) -> None:
        """Make sequence 0 hold ``tokens``, with the logits of every position from ``logits_from`` on: what it holds
        already is kept as far as it agrees (and has the logits asked for), the rest evaluated."""
        keep = len(os.path.commonprefix([self.prefix, list(tokens)]))
        missing = next((p for p in range(logits_from, min(keep, len(tokens))) if p not in self.prefix_logits), keep)
        keep = min(keep, missing)
        if keep < len(self.prefix):
            if not self.llm.cut(PREFIX, keep):  # a recurrent state cannot go back: the prefix is evaluated anew
                self.llm.forget(PREFIX)
                keep = 0
            self.prefix_logits = {p: v for p, v in self.prefix_logits.items() if p < keep}
        entries = [(PREFIX, p, tokens[p], p >= logits_from) for p in range(keep, len(tokens))]
        if entries:
            logits = iter(self.llm.decode(entries))
            self.prefix_logits.update({p: next(logits) for _, p, _, wanted in entries if wanted})
        self.prefix = list(tokens)

    def _groups(self, rows: Sequence[Sequence[int]], shared: int, extra: int) -> list[list[int]]:
        """Row indices in groups that fit at once: at most ``self.rows`` sequences, and the prefix plus every row's
        tokens after it plus ``extra`` (tokens it will generate) within the context's cells."""
        groups: list[list[int]] = []
        used = self.llm.n_ctx
        for index, row in enumerate(rows):
            need = len(row) - shared + extra
            if not groups or len(groups[-1]) == self.rows or used + need > self.llm.n_ctx:
                groups.append([])
                used = shared
            groups[-1].append(index)
            used += need
        return groups

    @staticmethod
    def _shared(rows: Sequence[Sequence[int]]) -> int:
        """The length of the prefix the rows share, leaving each at least one token of its own."""
        common = os.path.commonprefix([list(row) for row in rows])
        return max(0, min(len(common), min(len(row) for row in rows) - 1))

    def logits(self, rows: Sequence[Sequence[int]], wanted: Sequence[range]) -> list[np.ndarray]:
        """Per row, the logits at its positions ``wanted[i]`` (a range within the row), ``(len, vocab)`` float32."""
        if not rows:
            return []
        shared = self._shared(rows)
        self._hold(rows[0][:shared], min((w.start for w in wanted if len(w)), default=shared))
        out: list[np.ndarray] = [np.zeros((0, self.llm.n_vocab), np.float32)] * len(rows)
        for group in self._groups(rows, shared, 0):
            entries = []
            for seq, index in enumerate(group, start=1):
                self.llm.copy_sequence(PREFIX, seq)
                want = wanted[index]
                entries += [(seq, p, rows[index][p], p in want) for p in range(shared, len(rows[index]))]
            got = iter(self.llm.decode(entries))
            for index in group:
                own = [next(got) for p in wanted[index] if p >= shared]
                held = [self.prefix_logits[p] for p in wanted[index] if p < shared]
                out[index] = np.stack(held + own) if held or own else out[index]
            for seq in range(1, len(group) + 1):
                self.llm.forget(seq)
        return out

    def greedy(self, prompts: Sequence[Sequence[int]], steps: int,
               ended: Callable[[list[int], list[list[int]]], list[bool]],
               chosen_from: list[list[np.ndarray]] | None = None) -> list[list[int]]:
        """Per prompt, up to ``steps`` greedy tokens after it; after each step, ``ended(indices, tokens)`` says which
        of the rows that took it have ended. Every row still going takes its next step in one batch with the others
        of its group. ``chosen_from``: filled with each row's logits behind each of its tokens."""
        if not prompts or steps < 1:
            return [[] for _ in prompts]
        shared = self._shared(prompts)
        self._hold(prompts[0][:shared], shared)
        tokens: list[list[int]] = [[] for _ in prompts]
        for group in self._groups(prompts, shared, steps):
            entries = []
            for seq, index in enumerate(group, start=1):
                self.llm.copy_sequence(PREFIX, seq)
                prompt = prompts[index]
                entries += [(seq, p, prompt[p], p == len(prompt) - 1) for p in range(shared, len(prompt))]
            going = list(enumerate(group, start=1))  # (sequence, row index)
            logits = self.llm.decode(entries)
            while going:
                for (_, index), row in zip(going, logits):
                    tokens[index].append(int(np.argmax(row)))  # the first of equal maxima, as torch's argmax
                    if chosen_from is not None:
                        chosen_from[index].append(row)
                done = ended([index for _, index in going], [tokens[index] for _, index in going])
                for (seq, index), stop in zip(going, done):
                    if stop or len(tokens[index]) >= steps:
                        self.llm.forget(seq)
                going = [(seq, index) for (seq, index), stop in zip(going, done)
                         if not stop and len(tokens[index]) < steps]
                if going:
                    logits = self.llm.decode([(seq, len(prompts[index]) + len(tokens[index]) - 1,
                                               tokens[index][-1], True) for seq, index in going])
        return tokens
