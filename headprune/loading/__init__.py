"""Models in: what the user typed resolved to a local folder (``models``, with Hub downloads in ``model_download``
and GGUF files in ``gguf_source``, converted in ``gguf_convert``), the class that loads the checkpoint
(``model_class``), the checks that it is what its config says (``model_checks``), and where each family keeps its
heads (``adapters``).

Imports nothing, so that ``loading.models`` loads only what a load needs.
"""
