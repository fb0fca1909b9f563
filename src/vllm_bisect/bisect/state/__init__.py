"""Where a bisect's state lives: the session directory (``session.py``), its journal and the
result cache shared by sessions (``journal.py``), and the store over both (``store.py``); the
range a session pinned (``pin.py``); a server's finished evaluation kept while the server is
torn down, for a resumed call to take (``unrecorded.py``)."""
