"""``python -m mqstore.cli`` runs the CLI."""

from __future__ import annotations

from mqstore.cli import main

main()
