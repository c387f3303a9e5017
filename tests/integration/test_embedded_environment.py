"""The embedded PostgreSQL under the environment a user's shell or container passes on.

Real ``mqstore`` processes, as in test_embedded.py (whose helpers these reuse).
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.integration.test_embedded import Workdir, _assert_no_server_left, _env, work

__all__ = ["work"]  # the fixture, imported for these tests


def test_a_locale_that_is_not_installed_does_not_stop_the_first_start(work: Workdir) -> None:
    """``LANG``/``LC_ALL`` naming a locale the machine lacks (sent along by ``ssh``, or set
    in a container image without its locale data): the store is made and used all the
    same, its cluster independent of the caller's locale."""
    env = {**_env(), "LANG": "xx_XX.UTF-8", "LC_ALL": "xx_XX.UTF-8"}
    for command in (["db", "upgrade"], ["stats", "--json"]):
        result = subprocess.run(
            [sys.executable, "-m", "mqstore", *command], cwd=work.path, env=env,
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    _assert_no_server_left(work)
    conf = (work.pgdata / "postgresql.conf").read_text()
    assert re.search(r"^lc_messages = '?C'?\s", conf, re.MULTILINE), "not the C locale"
