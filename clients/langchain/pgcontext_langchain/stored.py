"""How a LangChain message is kept in a conversation message (pure functions).

The message's text is the conversation message's ``content``; the LangChain message itself
(``message_to_dict``) goes in ``metadata.langchain``, its long text kept once (``pgcontext_client.stored``).
A LangChain id that is not a valid ``message_id`` is stored as a digest of itself.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

META: Final = "langchain"
MESSAGE_ID: Final = re.compile(r"^(?!\.+$)[A-Za-z0-9_.:@-]{1,200}$")
"""The service's rule for a ``message_id``."""


def message_id(lc_id: str) -> str:
    """``lc_id`` as a conversation ``message_id``: itself when the service takes it, else a digest of it (the
    same for the same id, so a retried append still writes the message once)."""
    return lc_id if MESSAGE_ID.match(lc_id) else "lc-" + hashlib.sha256(lc_id.encode()).hexdigest()[:40]
