"""Reports of a bisect: result.json's model (``result.py``), what a report says (``view.py``)
and its Markdown and HTML (``render.py``, plot geometry in ``plot.py``), the terminal table
(``table.py``), the effect at the culprit with its interval (``effects.py``), the symptom
table (``symptom_view.py``), a skip's cause (``cause.py``), the endpoints' environments
(``env_section.py``), and the studies' sections (``section.py``, ``sections.py``: each study
owns its own; see docs/layout.md). ``sanitize.py``: Markdown that pings nobody and loads
nothing (report.md, the bot's comments)."""
