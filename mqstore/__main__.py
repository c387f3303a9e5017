"""``python -m mqstore`` runs the CLI."""

from __future__ import annotations

from mqstore.entry import main

main()
