"""``python -m headprune``: the command line (what ``torchrun ... -m headprune find`` starts in each process)."""

from headprune.cli.main import main

main()
