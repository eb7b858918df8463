"""llama.cpp through ctypes: the runtime found, loaded and its declarations checked (``binding``; ``decls/`` generated
from each release's ``llama.h``), a GGUF file run on task rows (``runtime``; rows on a shared prompt prefix in
``rows``) and an encoder's file against the masked original (``encoder``)."""
