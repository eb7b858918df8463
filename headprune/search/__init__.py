"""The search for an improving head set: split, screen, joint search, held-out verdict (``find``)."""
