"""Issue 53: the GPU run's servers (the journals of sessions host-cp and spec-cp in an
unpacked state.tgz) through the model of the range again, with this checkout's reading of
cached servers (natural scale since the fix; the run on the GPU read them as logs).

    PYTHONPATH=src python3 scripts/gpu53/reanalyse.py DIR   (DIR: state.tgz unpacked)

Indexes are the model's: -1 the good end, 0 the first commit after it, n - 1 the bad end."""
import json
import math
import sqlite3
import sys
import tomllib
from pathlib import Path

from vllm_bisect.bisect.search.changepoint import SEARCH_PRIOR
from vllm_bisect.bisect.search.range_model import servers_of
from vllm_bisect.models import Evaluation
from vllm_bisect.spec import parse_spec
from vllm_bisect.verdict.auto import direction, log_min_change, per_request
from vllm_bisect.verdict.changepoint import Prior, posterior

st = Path(sys.argv[1])
for sess, kind in (("host-cp", "host"), ("spec-cp", "spec")):
    planted = json.loads((st / "res" / f"{kind}.planted.json").read_text())
    shas = planted["shas"]
    idx = {s: i - 1 for i, s in enumerate(shas)}
    n = len(shas) - 1
    spec = parse_spec(tomllib.loads((st / "res" / f"{kind}-cp.toml").read_text()), source=kind)
    v = spec.verdict
    prior = Prior(direction=direction(v.symptom), min_step=log_min_change(v),
                  per_request=per_request(v.symptom), **SEARCH_PRIOR)
    con = sqlite3.connect(st / "sessions" / sess / "journal.sqlite")
    servers = []
    for sha, ev in con.execute("select commit_sha, evaluation from outcomes order by seq"):
        e = Evaluation.model_validate_json(ev)
        servers += servers_of(e, idx[sha], v.symptom)
    post = posterior(n, servers, prior)
    j, p = post.top()
    lo, hi = post.bounds[j], post.bounds[j + 1]
    eff, elo, ehi = post.effect_interval()
    pk = post.per_commit()
    top = [(float(pk[k]), k) for k in range(n) if pk[k] > 1e-3]
    print(f"{kind}: {len(servers)} servers, planted at {planted['planted_index'] - 1} "
          f"({planted['planted'][:12]}); top interval ({lo}, {hi}] P = {p:.4f}; step {eff:.3f}x "
          f"[{elo:.3f}, {ehi:.3f}]; P(none) {post.none:.3g} P(drift) {post.drift:.3g}; "
          f"P(first bad = k) > 0.001: " + ", ".join(f"{k} ({shas[k + 1][:12]}) {q:.3f}" for q, k in top))
    for s in servers:
        print(f"   server at {s.index:3d}: n {s.n}, geometric mean {math.exp(s.mean):.3f} ms")
