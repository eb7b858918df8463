"""Surgery on a loaded model: which heads each layer keeps (``plan``), the sliced or densified copy
(``slicing``), and the sliced-model class that rebuilds it from its config (``remote_modeling``, copied into
every sliced export and used by ``models`` to load one).

Imports nothing, so that ``models`` can load ``remote_modeling`` (torch and transformers only) without this
package pulling in ``slicing``, which itself needs ``models``.
"""
