"""Optional parts: which packages each extra brings, and one check that names the extra a feature needs.

headprune's core (``import headprune``, ``find``, ``eval``, ``export --format safetensors``) needs none of them;
``export --format onnx`` needs ``headprune[onnx]``, ``export --format gguf`` needs ``headprune[gguf]`` (gguf itself,
which reads ``.gguf`` models, is a dependency: only a checkout run without installing can lack it, and the message
then names that extra, which brings it too), ``--task lm-eval:...`` needs ``headprune[lm-eval]``,
a compressed-tensors checkpoint ``headprune[compressed-tensors]`` (``headprune[all]`` brings every one).
The check only looks for the packages (no import), so asking costs nothing and a missing one is one line, exit 2.
"""

from __future__ import annotations

import importlib.util

from headprune.errors import MissingExtraError

EXTRAS = {"onnx": ("onnx", "onnxruntime", "onnxscript"), "gguf": ("gguf",), "lm-eval": ("lm_eval",),
          "compressed-tensors": ("compressed_tensors",)}


def missing(modules: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` that cannot be found here."""
    gone = []
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                gone.append(name)
        except (ImportError, ValueError):  # a module whose import machinery refuses it counts as absent
            gone.append(name)
    return gone


def require(extra: str, feature: str) -> None:
    """Raise unless every package of ``extra`` is installed.

    Raises:
        MissingExtraError: "FEATURE needs PACKAGES, not installed: pip install 'headprune[EXTRA]'".
    """
    gone = missing(EXTRAS[extra])
    if gone:
        raise MissingExtraError(f"{feature} needs {', '.join(gone)}, not installed: pip install 'headprune[{extra}]'")
