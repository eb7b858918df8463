"""headprune's version, apart from the package root so that modules of any layer can record it (a journal's
environment) without importing the root, which imports every layer."""

__version__ = "0.2.0"
