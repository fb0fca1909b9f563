"""Where servers and child processes run: one launcher per artifact kind (``launch.py``,
the one place a server starts; over ``process.py`` and ``container.py``), the data they
hand on (``base.py``), child environments and deadlines (``childenv.py``, ``bounded.py``),
ports, per-GPU locks and GPU state (``ports.py``, ``gpulock.py``, ``gpustate.py``)."""
