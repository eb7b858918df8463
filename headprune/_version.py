"""headprune's version, apart from the package root so that modules of any layer can record it (a journal's
environment) without importing the root, which imports every layer. The one place the version is written:
pyproject.toml reads it from here (``[tool.setuptools.dynamic]``)."""

__version__ = "0.3.0"
