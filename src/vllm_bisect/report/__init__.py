"""Reports of a bisect: result.json's model (``result.py``), what a report says (``view.py``)
and its Markdown and HTML (``render.py``), the terminal table (``table.py``), the effect at
the culprit with its interval (``effects.py``), and the studies' sections (``section.py``,
``sections.py``: each study owns its own; see docs/layout.md)."""
