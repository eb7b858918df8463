"""The lowest layer: what every other layer may use. Its modules import no other part of headprune but ``errors``.

User-facing choice lists (``choices``), atomic outputs (``io``), the output folder's lock (``folder_lock``), content
hashes (``hashing``), records to and from JSON (``record_json``), progress lines (``progress``), optional packages
(``extras``), the differences between transformers releases (``compat``), devices and dtypes (``devices``),
data-parallel runs (``distributed``), CPU linear layers through oneDNN (``cpu_linear``), limits on work and numbers from
the environment (``limits``), and a checkpoint's weight files (``checkpoint_files``).

Imports nothing, so that each module costs only its own imports (``choices``, ``io``, ``record_json`` and
``folder_lock`` load no torch: ``push`` reads an export's record without it).
"""
