#!/usr/bin/env bash
# A CPU dry run of the driver's host-cpint job (scripts/gpu_source_run.py) on the simulator:
# a `sim history` (16 commits, 1.5x ITL at commit 6) stands in for kind 3's source history;
# the driver's own cp_spec writes host-cp.toml from its spec (the spec a user writes), then the
# driver runs the job as on the GPU: SIGINT after the journal's 2nd finished start, resumed
# with the printed command.   bash scripts/gpu53/dryrun53.sh [DIR] [BUDGET_S]
set -eu
cd "$(dirname "$0")/../.."
D=${1:-/tmp/dry53}; B=${2:-420}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
rm -rf "$D"; mkdir -p "$D/work/res" "$D/work/model" "$D/out"
echo '{}' > "$D/work/model/config.json"   # the driver makes no model
python3 -m vllm_bisect.cli sim history "$D/work/hist/host" --commits 16 --slow-at 6 --slow-factor 1.5 | tee "$D/sim.txt"
python3 - "$D" <<'PY'
import argparse, json, subprocess, sys, tomllib
from pathlib import Path
d = Path(sys.argv[1]); work = d / "work"
sys.path.insert(0, "scripts")
import gpu_source_run as g
data = tomllib.loads((work / "hist" / "host-spec.toml").read_text())
data["probe"] = {**data.get("probe", {}), "requests": 3, "warmup": 1}  # as source_spec_data
(work / "host.toml").write_text((work / "hist" / "host-spec.toml").read_text())
line = next(l for l in (d / "sim.txt").read_text().splitlines() if l.startswith("planted itl at "))
shas = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=work / "hist" / "host",
                      capture_output=True, text=True, check=True).stdout.split()
(work / "res" / "host.planted.json").write_text(json.dumps(
    {"planted": line.split()[-1], "shas": shas}))
a = argparse.Namespace(work=work, out=d / "out", budget_s=60.0, sdist=None, wheel=None, state=None)
g.Run(a).cp_spec("host", data)
print((work / "host-cp.toml").read_text())
PY
timeout $((B + 60)) python3 scripts/gpu_source_run.py "$D/work" "$D/out" --sdist /dev/null --wheel /dev/null \
    --budget-s "$B" --only host-cpint
