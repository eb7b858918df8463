"""Surgery on a loaded model: the hook that silences heads (``ablation``), which heads each layer keeps (``plan``),
the sliced or densified copy (``slicing``), and the sliced-model class that rebuilds it from its config
(``remote_modeling``, copied into every sliced export and used by ``loading.models`` to load one).

Imports nothing, so that ``loading.models`` can load ``remote_modeling`` (torch and transformers only) without this
package pulling in ``slicing`` and ``ablation``, which themselves need ``loading.models``.
"""
