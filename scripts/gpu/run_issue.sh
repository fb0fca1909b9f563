#!/usr/bin/env bash
# One issue's runs on the GPU machine: the wheel parts carried in, installed once, the driver
# (scripts/gpu_source_run.py) run in the foreground or the background, its state snapshotted
# into $OUT. Not called directly: an issue's wrapper (scripts/gpu45/run45.sh,
# scripts/gpu53/run53.sh) sets ISSUE (the tag: iNN.tar.part*, runNN, INN_* env), ALL (its
# default jobs) and EXTRA (files beside the driver); wrapper and this file are both copied to
# .gpu/bin/ (git-ignored, carried).
#
#   bash .gpu/bin/runNN.sh carry               # a carry call: keep this call's wheel part
#   bash .gpu/bin/runNN.sh BUDGET [JOBS]       # foreground: the driver gets what is left of
#                                              #   BUDGET s (the call's whole wall), cut jobs
#                                              #   resume next call
#   bash .gpu/bin/runNN.sh bg TOTAL [JOBS] [WAIT]  # background: start the driver with TOTAL s
#                                              #   (it outlives this call: setsid), then wait
#   bash .gpu/bin/runNN.sh wait [WAIT]         # wait for it up to WAIT s (default 560), then
#                                              #   snapshot its state into $OUT
#
# Every call first copies the wheel parts it carried (.whl/iNN.tar.part*) to $PARTS, outside
# the repository. Once per machine, before the driver: the parts checked against
# .gpu/bin/parts.sha256 and unpacked into $W (the vLLM 0.25.1 sdist and wheel, the serve
# wheels, GitPython, vLLM's build requirements), each file checked against $W/SHA256SUMS,
# every wheel but vLLM's own installed with ONE `pip install --no-deps --target $SITE` (vLLM is
# built from each commit: a vllm in $SITE, on PYTHONPATH, would shadow the editable builds).
# An earlier machine's state (.gpu/state/state.tgz, carried) is unpacked when $WORK has no
# sessions yet. The driver (.gpu/bin/gpu_source_run.py when there, else the repository's)
# makes the model and the histories (fixed commit dates, seed 29) and runs JOBS.
# $OUT gets state.tgz, results.tgz, call.log (+ driver.log in bg/wait) and trace_*.json.gz
# while what comes back allows (8 files, 64 MiB).
# INN_REDO=job,job: run those again (a job that failed, not cut, counts as done).
# Env overrides (a dry run on a CPU machine): INN_TMP, WORK, PY, INN_SDIST, INN_WHEEL, INN_CPU=1.
set -u
: "${ISSUE:?run through an issue's wrapper (scripts/gpu53/run53.sh): it sets ISSUE and ALL}"
: "${ALL:?run through an issue's wrapper: it sets ALL, the default jobs}"
env_of() { local n="I${ISSUE}_$1"; printf '%s' "${!n:-${2:-}}"; }   # I53_TMP etc.
T0=$SECONDS
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
TMPB=$(env_of TMP /tmp)
PARTS=$TMPB/i${ISSUE}parts W=$TMPB/w SITE=$TMPB/site DOUT=$TMPB/out${ISSUE}bg PIDF=$TMPB/i${ISSUE}-driver.pid
WORK=${WORK:-$TMPB/gpuwork}
PY=${PY:-python3}
OUT=${OUT:-$TMPB/out$ISSUE}
mkdir -p "$OUT" "$PARTS"
exec > >(tee -a "$OUT/call.log") 2>&1
say() { printf '[run%s %5ds] %s\n' "$ISSUE" $((SECONDS - T0)) "$*"; }
MODE=fg
case "${1:-}" in carry|bg|wait) MODE=$1; shift;; esac

# 1. this call's parts, outside the repository (each checked)
for f in .whl/i$ISSUE.tar.part*; do
  [ -f "$f" ] || continue
  cmp -s "$f" "$PARTS/${f##*/}" 2>/dev/null || cp "$f" "$PARTS/"
done
if [ $MODE = carry ] || [ ! -f "$SITE/.i$ISSUE-installed" ]; then
  ok=""
  for p in $(cd "$PARTS" && ls i$ISSUE.tar.part* 2>/dev/null); do
    if (cd "$PARTS" && grep " $p\$" "$ROOT/.gpu/bin/parts.sha256" | sha256sum -c --quiet - >/dev/null 2>&1)
    then ok="$ok ${p#i$ISSUE.tar.}"; else say "damaged: $p (removed: carry it again)"; rm -f "$PARTS/$p"; fi
  done
  say "parts on this machine:${ok:- none} (of $(wc -l < .gpu/bin/parts.sha256))"
fi
[ $MODE = carry ] && { df -h "$TMPB" | tail -1; exit 0; }

driver_alive() { [ -f "$PIDF" ] && kill -0 "$(cat "$PIDF")" 2>/dev/null; }

# what a killed driver left (its jobs and their servers run in sessions of their own, so they
# outlive it and the call): the jobs first (SIGTERM: they stop their servers and keep their
# journals), then any server of our model; by pid, never while a driver runs
reap() {
  driver_alive && return 0
  local d cmd pat n
  for pat in "*vllm_bisect.cli*$WORK*" "*serve*$WORK/model*"; do
    n=0
    for d in /proc/[0-9]*; do
      { cmd=$(tr '\0' ' ' < "$d/cmdline"); } 2>/dev/null || continue
      # shellcheck disable=SC2254
      case "$cmd" in $pat)
        say "reap: pid ${d#/proc/} (${cmd:0:160})"
        kill -TERM -- "-${d#/proc/}" 2>/dev/null || kill -TERM "${d#/proc/}" 2>/dev/null; n=$((n + 1));;
      esac
    done
    [ $n -eq 0 ] && continue
    for _ in $(seq 30); do  # up to 30 s to stop
      alive=0
      for d in /proc/[0-9]*; do
        { cmd=$(tr '\0' ' ' < "$d/cmdline"); } 2>/dev/null || continue
        # shellcheck disable=SC2254
        case "$cmd" in $pat) alive=1; break;; esac
      done
      [ $alive = 0 ] && break; sleep 1
    done
    for d in /proc/[0-9]*; do
      { cmd=$(tr '\0' ' ' < "$d/cmdline"); } 2>/dev/null || continue
      # shellcheck disable=SC2254
      case "$cmd" in $pat) kill -KILL "${d#/proc/}" 2>/dev/null;; esac
    done
  done
  return 0
}

# 2. unpack and install, once per machine
if [ ! -f "$SITE/.i$ISSUE-installed" ]; then
  (cd "$PARTS" && sha256sum -c --quiet "$ROOT/.gpu/bin/parts.sha256") || {
    say "parts missing or damaged: carry the others first (PLAN.md)"; exit 3; }
  rm -rf "$W" "$SITE"
  cat "$PARTS"/i$ISSUE.tar.part? | tar -x -C "$TMPB" || { say "unpack failed"; exit 3; }
  (cd "$W" && sha256sum -c --quiet SHA256SUMS) || { say "a file of the tarball is damaged"; exit 3; }
  say "unpacked $(ls "$W" | wc -l) files into $W"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      $(ls "$W"/*.whl | grep -v '/vllm-0\.25\.1-') > "$TMPB/pip$ISSUE.log" 2>&1
  rc=$?; grep -v '^WARNING: Location' "$TMPB/pip$ISSUE.log" | tail -n 5
  [ $rc = 0 ] || { say "pip install failed (exit $rc): $TMPB/pip$ISSUE.log"; exit 3; }
  touch "$SITE/.i$ISSUE-installed"; say "installed $(ls "$W"/*.whl | grep -vc '/vllm-0\.25\.1-') wheels into $SITE"
  PYTHONPATH=$SITE $PY -c "import setuptools, git, pydantic, sys; print('python', sys.version.split()[0], 'setuptools', setuptools.__version__, 'GitPython', git.__version__, 'pydantic', pydantic.VERSION)"
  if [ -z "$(env_of CPU)" ]; then
    $PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
  fi
fi
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH PYTHONUNBUFFERED=1 \
       HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
SDIST=$(env_of SDIST "$W/vllm-0.25.1.tar.gz")
WHEEL=$(env_of WHEEL "$W/vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl")

# 3. the driver and the code it runs, copied out of the repository before a driver starts:
# every call lays the working tree anew, which must not touch a driver that goes on (bg).
# The driver: the copy beside this file when there (the one the issue's plan checked), else
# the repository's; run from $G/scripts: its ROOT is $G (the checkout's src/ and model script)
G=$TMPB/gsr$ISSUE
if ! driver_alive; then
  rm -rf "$G"; mkdir -p "$G/scripts"
  cp -r "$ROOT/src" "$G/src"; cp "$ROOT/scripts/make_tiny_mtp_model.py" "$G/scripts/"
  drv=.gpu/bin/gpu_source_run.py; [ -f "$drv" ] || drv=scripts/gpu_source_run.py
  cp "$drv" "$G/scripts/"
  for x in ${EXTRA:-}; do cp ".gpu/bin/$x" "$G/scripts/"; done   # e.g. issue 53's noise.py
  say "driver: $drv${EXTRA:+ (+ $EXTRA)}"
  say "code: $(cd "$ROOT" && git log -1 --format='%h %s' 2>/dev/null | cut -c1-100) (+ $(cd "$ROOT" && git status --porcelain 2>/dev/null | wc -l) changed files) copied to $G"
fi
GSR=$G/scripts/gpu_source_run.py
export PYTHONPATH=$SITE:$G/src
if ! driver_alive; then
  if [ -f .gpu/state/state.tgz ] && [ ! -d "$WORK/sessions" ]; then  # a fresh machine: resume
    mkdir -p "$WORK" && tar -xzf .gpu/state/state.tgz -C "$WORK" && say "state: .gpu/state/state.tgz unpacked into $WORK"
  fi
  REDO=$(env_of REDO)
  for j in ${REDO//,/ }; do
    [ -f "$WORK/res/$j.json" ] && say "redo: $j" && rm -f "$WORK/res/$j.json"
  done
fi

summary() {
  $PY - "$WORK/res" <<'EOF'
import json, sys
from pathlib import Path
res = Path(sys.argv[1])
for f in sorted(res.glob("*-*.json")):
    if f.name.count(".") > 1 and not f.name.endswith(".cut.json"):
        continue
    if f.name.endswith(".cut.json") and (res / f.name.replace(".cut.json", ".json")).exists():
        continue  # done since (its .json has earlier_calls_wall_s)
    d = json.loads(f.read_text())
    if not isinstance(d, dict) or "job" not in d:
        continue
    keep = {k: d[k] for k in ("rc", "wall_s", "walls_s", "earlier_calls_wall_s", "first_bad",
                              "right", "minimal_files", "tests", "starts_by_phase",
                              "server_starts", "servers_kept", "servers_done") if k in d}
    s = d.get("summary") or {}
    keep.update({k: s[k] for k in ("finished", "first_bad", "right", "starts_by_phase",
                                   "starts_total", "plain_bisect_starts") if k in s})
    print(("CUT  " if f.name.endswith(".cut.json") else "DONE ") + d["job"], json.dumps(keep))
EOF
}

fit_out() {  # what comes back: at most 8 files and 64 MiB; the largest traces go first
  while [ "$(du -cb "$OUT"/* | tail -1 | cut -f1)" -gt 60000000 ] || [ "$(ls "$OUT" | wc -l)" -gt 8 ]; do
    big=$(ls -S "$OUT"/trace_*.json.gz 2>/dev/null | head -1); [ -n "$big" ] || break
    say "dropped $big ($(stat -c %s "$big") bytes): over what comes back"; rm -f "$big"
  done
  ls -la "$OUT"
}

if [ $MODE = fg ]; then
  BUDGET=${1:?usage: run$ISSUE.sh carry | BUDGET [JOBS] | bg TOTAL [JOBS] [WAIT] | wait [WAIT]}
  JOBS=${2:-$ALL}
  driver_alive && { say "a background driver runs (pid $(cat "$PIDF")): use wait"; exit 4; }
  reap
  STATE=(); [ -f .gpu/state/state.tgz ] && STATE=(--state "$ROOT/.gpu/state/state.tgz")
  LEFT=$((BUDGET - (SECONDS - T0)))
  say "driver: budget $LEFT s, jobs $JOBS"
  $PY "$GSR" "$WORK" "$OUT" --sdist "$SDIST" --wheel "$WHEEL" --budget-s "$LEFT" --only "$JOBS" ${STATE[@]+"${STATE[@]}"}
  say "driver exit $?"
  reap; summary; fit_out; say "end"; exit 0
fi

if [ $MODE = bg ]; then
  TOTAL=${1:?usage: run$ISSUE.sh bg TOTAL [JOBS] [WAIT]}
  JOBS=${2:-$ALL}
  WAIT=${3:-560}
  if driver_alive; then
    say "the driver runs already (pid $(cat "$PIDF")): waiting for it"
  else
    reap; mkdir -p "$DOUT"
    STATE=(); [ -f .gpu/state/state.tgz ] && STATE=(--state "$ROOT/.gpu/state/state.tgz")
    say "driver (background): budget $TOTAL s, jobs $JOBS"
    setsid nohup $PY "$GSR" "$WORK" "$DOUT" --sdist "$SDIST" --wheel "$WHEEL" --budget-s "$TOTAL" \
        --only "$JOBS" ${STATE[@]+"${STATE[@]}"} >> "$DOUT/driver.log" 2>&1 < /dev/null &
    echo $! > "$PIDF"
  fi
else
  WAIT=${1:-560}
  driver_alive || say "no driver runs on this machine (ended, or a fresh machine: use bg)"
fi

# bg / wait: until the driver ends or WAIT s of this call have passed, then a snapshot
while driver_alive && [ $((SECONDS - T0)) -lt "$WAIT" ]; do sleep 5; done
if driver_alive; then
  for i in 1 2 3; do  # a snapshot of the running driver's state (SQLite backups: consistent)
    $PY "$GSR" "$WORK" "$OUT" --sdist "$SDIST" --wheel "$WHEEL" --pack-only && break; sleep 2
  done
  say "snapshot taken; the driver goes on (pid $(cat "$PIDF")): next call 'wait'"
else
  [ -d "$DOUT" ] && cp "$DOUT"/state.tgz "$DOUT"/results.tgz "$OUT"/ 2>/dev/null
  reap; say "the driver has ended"
fi
[ -d "$DOUT" ] && { cp "$DOUT"/driver.log "$OUT"/ 2>/dev/null; cp "$DOUT"/trace_*.json.gz "$OUT"/ 2>/dev/null; tail -n 25 "$DOUT/driver.log"; }
last=$(ls -t "$WORK"/res/*.log 2>/dev/null | head -1)  # the job at work (or the last one)
[ -n "$last" ] && { say "tail of $last:"; tail -n 12 "$last" | cut -c1-300; }
summary; fit_out; say "end"
