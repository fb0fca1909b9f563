"""Where a bisect's state lives: the session directory (``session.py``), its journal and the
result cache shared by sessions (``journal.py``), and the store over both (``store.py``)."""
