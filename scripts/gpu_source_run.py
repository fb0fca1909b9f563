#!/usr/bin/env python3
"""Bisect vLLM's own code on the GPU machine (issue 29): resumable, one call or several.

    python3 scripts/gpu_source_run.py WORK OUT --sdist vllm-0.25.1.tar.gz --wheel vllm-...whl
                                      [--budget-s S] [--only cap-run,cap-hook,...]

Stages (each skipped when its result exists under WORK/res, which is tarred to
OUT/results.tgz after every stage): the tiny MTP model (scripts/make_tiny_mtp_model.py), the
four source histories (``vllm_bisect.sim.source_history``: cap, spec, host, csrc), then the
jobs in order: ``vllm-bisect run`` and ``git bisect run vllm-bisect hook`` per kind (the hook
shares the run's result cache: a commit the run measured is not measured again), ``isolate``
on the culprits. A job is started only when the budget leaves at least ``MIN_JOB_S``; a job
cut by the budget is resumed by the next call (`run --session`, the cached results).

Across machines (a machine is held 30 min at most, a session's device time ends): every
pack also writes OUT/state.tgz (res/, each session's journal, spec, result and kept explain
servers, the result cache; ~1 MB). Carried back in and passed as ``--state FILE`` on a fresh
machine, it is unpacked into WORK before the stages: the histories are regenerated with the
same shas (their commit dates are fixed), so `run --session` resumes from the journal and
`explain` from its kept servers; only builds are made again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

T0 = time.monotonic()
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from vllm_bisect.spec import dump_spec, parse_spec  # noqa: E402

# "a+b": run a and b at the same time (one GPU: the runtime serializes their server start-ups,
# their builds and probes overlap the other's start-up)
# (the order of what is left after sessions 12-16: docs/validation.md (i)-(m); jobs whose
# result exists under WORK/res are skipped, an explain cut by the budget resumes per server;
# done on real vLLM: cap/spec run and hook, spec-explain, cap-isolate, csrc-run, host-explain,
# host-mtpoff; host-graphs got 3 of its 4 servers in session 16). Kind 3's run first: with
# its rest checks it needs ~20+ server starts, more than one fresh machine's time beside
# anything else; it goes on across machines through --state
# issue 45's order: kind 3 through run and the hook (the default spec, one cache), kind 2 again
# for its per-phase starts, isolate on kind 2's culprit, explain on kind 3, eager vs graphs
# issue 53's order: the model of the range on kind 3, interrupted with SIGINT after its
# second server and resumed ("cpint"), then on kind 2 ("cp"); session 24 also ran the probe's
# noise on one commit ("host-noise", scripts/gpu53/noise.py) and had explain next; session 25
# runs the two bisects only (still available by name: --only host-noise,host-explain)
JOBS = ("host-cpint", "spec-cp")
ISSUE45_JOBS = ("host-rundef", "host-hookdef", "spec-rundef", "spec-isolate", "host-explain",
                "host-graphs")
# "cp" / "cpint": `vllm-bisect run` with the spec a user writes (`[verdict] symptom = "itl"`
# and nothing else in [verdict]: strategy "auto", which runs the model of the range for itl on
# one worker; the run's log says why: "verdict strategy changepoint: auto: ..."; session 24
# wrote `strategy = "changepoint"` because auto did not choose it then); "cpint": SIGINT
# to the run's process group as soon as its journal holds INTERRUPT_AFTER finished server
# starts, then resumed with the command the interrupt printed (`run --session DIR
# --cache-dir DIR`)
INTERRUPT_AFTER = 2
# "rundef": `vllm-bisect run` with the default spec (symptom only: no strategy, factor, or
# verification overrides); "hook" / "hookdef": `git bisect run vllm-bisect hook` with the
# kind's spec / its default spec (the same result cache as the run); "explain":
# `vllm-bisect explain` on that session's culprit
# (or, for a kind whose bisect did not run, on the planted commit through --culprit);
# "mtpoff" / "graphs": `explain --against`, the planted commit's parent under the default
# spec against the same commit without MTP / without --enforce-eager (two known setups)
MIN_JOB_S = 120.0


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def costs(session: Path) -> dict[str, object]:
    """Per step: build (checkout, venv, editable install: from the build logs), server
    lifetime (start + probe + stop: the journal), probe wall (the measurements)."""
    import re
    import sqlite3

    builds = []
    for f in sorted((session / "logs").glob("build-*.log")):
        text = f.read_text(errors="replace")
        took = [float(x) for x in re.findall(r"# exit \S+ after ([0-9.]+) s", text)]
        co = re.search(r"# checkout ([0-9.]+) s", text)
        builds.append({"commit": f.stem[6:], "checkout_s": float(co[1]) if co else None,
                       "venv_s": took[0] if took else None,
                       "install_s": took[1] if len(took) > 1 else None})
    servers: list[dict[str, object]] = []
    journal = session / "journal.sqlite"
    if journal.exists():
        con = sqlite3.connect(journal)
        for sha, started, stopped in con.execute(
                "select commit_sha, started, stopped from servers order by started"):
            servers.append({"commit": sha[:12], "lifetime_s":
                            None if stopped is None else round(stopped - started, 1)})
        con.close()
    starts: list[dict[str, object]] = []
    if journal.exists():
        con = sqlite3.connect(journal)
        try:
            for sha, phase, created in con.execute(
                    "select commit_sha, phase, created from starts order by seq"):
                starts.append({"commit": sha[:12], "phase": phase, "at": round(created, 1)})
        except sqlite3.OperationalError:  # a journal from before the starts table
            pass
        con.close()
    probes = []
    result = session / "result.json"
    if result.exists():
        for p in json.loads(result.read_text()).get("probed", []):
            m = p.get("measurement") or {}
            probes.append({"commit": p["commit"][:12], "verdict": p["verdict"],
                           "from_cache": p.get("from_cache"), "probe_wall_s": m.get("wall_s"),
                           "output_tokens": m.get("output_tokens"), "itl_ms": m.get("itl_ms"),
                           "tokens_per_chunk": m.get("tokens_per_chunk"),
                           "acceptance_length": m.get("acceptance_length")})
    return {"builds": builds, "servers": servers, "starts": starts, "probes": probes}


def starts_summary(result: dict[str, Any] | None, starts: list[dict[str, object]],
                   planted: str) -> dict[str, object]:
    """The numbers issue 45 asks for per run, at the top of the job's summary: found against
    planted, server starts per phase (result.json's, else counted from the journal: a cut
    run) beside plain git bisect's, wall and calls."""
    by: dict[str, int] = {}
    for s in starts:
        by[str(s["phase"])] = by.get(str(s["phase"]), 0) + 1
    out: dict[str, object] = {"planted": planted}
    if result is None:
        out.update(finished=False, starts_by_phase=by, starts_total=sum(by.values()))
        return out
    phases: dict[str, int] = result.get("starts_by_phase") or by
    out.update(finished=True, first_bad=result.get("first_bad"),
               right=result.get("first_bad") == planted, starts_by_phase=phases,
               starts_total=sum(phases.values()),
               plain_bisect_starts=result.get("plain_bisect_starts"),
               server_starts=result.get("server_starts"),
               verify_server_starts=result.get("verify_server_starts"),
               strategy_chosen=result.get("strategy_chosen"), forecast=result.get("forecast"),
               wall_s_session=result.get("wall_s"), calls=result.get("calls"))
    return out


def explain_counts(session: Path) -> dict[str, object]:
    """An explain's server starts in this call, the servers kept from earlier calls, and the
    servers profiled so far (explain/servers/*.json: a cut explain resumes from them)."""
    out: dict[str, object] = {"servers_done": sorted(
        f.stem for f in (session / "explain" / "servers").glob("*.json"))}
    doc = session / "explain.json"
    if doc.exists():
        d = json.loads(doc.read_text())
        out.update(server_starts=d.get("server_starts"), servers_kept=d.get("servers_kept"),
                   culprit=d.get("culprit"), parent=d.get("parent"))
    return out


def hook_starts(repo: Path) -> dict[str, int]:
    """Server starts of the hook's own journals (.git/vllm-bisect-hook/*/journal.sqlite), by
    phase: the measurements it took from the run's cache are not among them."""
    import sqlite3

    by: dict[str, int] = {}
    for journal in sorted((repo / ".git" / "vllm-bisect-hook").glob("*/journal.sqlite")):
        con = sqlite3.connect(journal)
        try:
            for phase, n in con.execute("select phase, count(*) from starts group by phase"):
                by[str(phase)] = by.get(str(phase), 0) + int(n)
        except sqlite3.OperationalError:
            pass
        con.close()
    return by


class Run:
    def __init__(self, a: argparse.Namespace) -> None:
        self.work, self.out, self.budget = a.work, a.out, a.budget_s
        self.res = self.work / "res"
        self.res.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.cache = self.work / "cache"
        self.sdist, self.wheel = a.sdist, a.wheel
        self.env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}",
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        if a.state is not None and a.state.is_file():
            self.restore(a.state)

    def left(self) -> float:
        return self.budget - (time.monotonic() - T0)

    def pack(self) -> None:
        with self.lock:
            with tarfile.open(self.out / "results.tgz", "w:gz") as tar:
                tar.add(self.res, arcname="res")
            self.pack_state()

    # what a fresh machine needs to resume (no builds, no traces, no logs)
    STATE = ("spec.toml", "result.json", "explain.json", "explain/servers/*.json")

    def pack_state(self) -> None:
        """OUT/state.tgz: res/, the sessions' journals and kept numbers, the result cache;
        the SQLite files through the backup API (a job may be writing them)."""
        import sqlite3
        import tempfile
        with tempfile.TemporaryDirectory() as tmp, \
                tarfile.open(self.out / "state.tgz.part", "w:gz") as tar:
            tar.add(self.res, arcname="res")
            dbs = [self.cache / "results.sqlite",
                   *sorted((self.work / "sessions").glob("*/journal.sqlite"))]
            for i, db in enumerate(d for d in dbs if d.is_file()):
                copy = Path(tmp) / f"{i}.sqlite"
                src, dst = sqlite3.connect(db), sqlite3.connect(copy)
                try:
                    src.backup(dst)
                finally:
                    src.close()
                    dst.close()
                tar.add(copy, arcname=str(db.relative_to(self.work)))
            for pattern in self.STATE:
                for f in sorted((self.work / "sessions").glob(f"*/{pattern}")):
                    tar.add(f, arcname=str(f.relative_to(self.work)))
        os.replace(self.out / "state.tgz.part", self.out / "state.tgz")

    def restore(self, state: Path) -> None:
        """Unpack an earlier machine's state.tgz into WORK (a fresh machine only)."""
        if (self.work / "sessions").exists():
            log(f"state: {self.work / 'sessions'} exists, {state} not unpacked")
            return
        with tarfile.open(state) as tar:
            tar.extractall(self.work, filter="data")
        log(f"state: unpacked {state} ({len(list(self.res.iterdir()))} results)")

    def save(self, name: str, doc: object) -> None:
        (self.res / name).write_text(json.dumps(doc, indent=2) + "\n")
        self.pack()

    def copy_out(self, session: Path, name: str, *files: str) -> None:
        """The session's FILES that exist, into res/ as NAME_FILE."""
        for k in files:
            if (session / k).exists():
                shutil.copy(session / k, self.res / f"{name}_{k}")

    def collect(self, doc: dict[str, object], session: Path, name: str, planted: object) -> None:
        """What a `run` job's session left, into its record: result.json, report.md (into
        res/), the costs by phase from the journal and the starts' summary against the
        planted commit (an error kept as such: the record is written either way)."""
        result = session / "result.json"
        if result.exists():
            doc["result"] = json.loads(result.read_text())
            self.copy_out(session, name, "report.md")
        try:
            doc["costs"] = costs(session)
        except Exception as err:
            doc["costs"] = {"error": repr(err)}
        try:
            c, r = doc["costs"], doc.get("result")
            doc["summary"] = starts_summary(
                r if isinstance(r, dict) else None,
                c.get("starts", []) if isinstance(c, dict) else [], planted)
        except Exception as err:
            doc["summary"] = {"error": repr(err)}

    def trace_out(self, session: Path, name: str) -> None:
        """The first raw trace of an explain, gzipped into OUT (a real vLLM trace to read
        here, beside the numbers), when it fits what comes back (16 MiB a file)."""
        import gzip
        traces = sorted((session / "explain" / "traces").rglob("*.pt.trace.json*"))
        if not traces:
            return
        raw = traces[0].read_bytes()
        packed = raw if traces[0].name.endswith(".gz") else gzip.compress(raw, 6)
        if len(packed) < 15_000_000:
            (self.out / f"trace_{name}.json.gz").write_bytes(packed)
        log(f"{name}: first trace {traces[0].name}, {len(raw) / 1e6:.1f} MB "
            f"({len(packed) / 1e6:.1f} MB gzipped)")

    def cmd(self, argv: list[str], cwd: Path, timeout: float, name: str) -> tuple[int, float]:
        """Run argv with its output in res/NAME.log; SIGTERM at the timeout (resumable)."""
        t = time.monotonic()
        with open(self.res / f"{name}.log", "a") as f:
            f.write(f"$ {' '.join(argv)}\n")
            f.flush()
            p = subprocess.Popen(argv, cwd=cwd, env=self.env, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            try:
                code = p.wait(timeout=max(timeout, 1.0))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                code = -15
        return code, time.monotonic() - t

    def stage_model(self) -> None:
        model = self.work / "model"
        if (model / "config.json").exists():
            return
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tiny_mtp_model.py"),
                        str(model)], check=True, env=self.env)

    def stage_histories(self, kinds: set[str] | None = None) -> None:
        from vllm_bisect.sim.source_history import PlantKind, make_source_history, source_spec_data
        for kind in PlantKind:
            if kinds is not None and kind.value not in kinds:
                continue
            spec = self.work / f"{kind}.toml"
            if spec.exists():
                continue
            t = time.monotonic()
            h = make_source_history(self.sdist, self.work / "hist" / kind.value, kind, seed=29)
            data = source_spec_data(h, str(self.work / "model"), str(self.wheel))
            spec.write_text(dump_spec(parse_spec(data, source=kind.value)))
            shutil.copy(h.record, self.res / f"{kind}.planted.json")
            shutil.copy(spec, self.res / f"{kind}.toml")
            default = dict(data)  # the spec a user writes: the symptom and nothing else
            symptom = {"cap": "length", "csrc": "length"}.get(kind.value, "itl")
            default["verdict"] = {"symptom": symptom}
            if symptom == "length":
                default["verdict"] = {"symptom": symptom, "min_output_tokens": 256}
            (self.work / f"{kind}-default.toml").write_text(
                dump_spec(parse_spec(default, source=f"{kind.value}-default")))
            shutil.copy(self.work / f"{kind}-default.toml", self.res / f"{kind}-default.toml")
            self.cp_spec(kind.value, data)
            log(f"history {kind}: planted at {h.planted_index} ({h.planted[:12]}) "
                f"in {time.monotonic() - t:.1f} s")
        self.pack()

    def cp_spec(self, kind: str, data: dict[str, Any]) -> None:
        """WORK/KIND-cp.toml: the spec a user writes, `[verdict] symptom = "itl"` and nothing
        else in [verdict] (issue 53: strategy "auto" runs the model of the range for itl)."""
        if kind not in ("host", "spec"):
            return
        cp = dict(data)
        cp["verdict"] = {"symptom": "itl"}
        out = self.work / f"{kind}-cp.toml"
        out.write_text(dump_spec(parse_spec(cp, source=f"{kind}-cp")))
        shutil.copy(out, self.res / out.name)

    def interrupted(self, argv: list[str], cwd: Path, timeout: float, name: str,
                    journal: Path) -> dict[str, object]:
        """Run argv; SIGINT its process group (a Ctrl-C) once the session's journal holds
        INTERRUPT_AFTER finished server starts; what the journal held then."""
        import sqlite3
        t = time.monotonic()
        with open(self.res / f"{name}.log", "a") as f:
            f.write(f"$ {' '.join(argv)}\n")
            f.flush()
            p = subprocess.Popen(argv, cwd=cwd, env=self.env, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            sent: dict[str, object] = {}
            while p.poll() is None and time.monotonic() - t < timeout:
                time.sleep(0.5)
                if sent or not journal.exists():
                    continue
                try:
                    con = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
                    rows = con.execute("select seq, commit_sha, phase, created, done from "
                                       "starts order by seq").fetchall()
                    con.close()
                except sqlite3.Error:
                    continue
                if sum(r[4] == 1 for r in rows) >= INTERRUPT_AFTER:
                    os.killpg(p.pid, signal.SIGINT)
                    sent = {"at_s": round(time.monotonic() - t, 1), "wall_clock": time.time(),
                            "starts_then": [[r[1][:12], r[2], r[4]] for r in rows]}
                    f.write(f"# driver: SIGINT to the process group after {len(rows)} starts "
                            f"({INTERRUPT_AFTER} done)\n")
                    f.flush()
                    log(f"{name}: SIGINT after {sent['at_s']} s, starts {sent['starts_then']}")
            try:
                code = p.wait(timeout=max(1.0, timeout - (time.monotonic() - t)))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    code = p.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    code = p.wait()
                code = -15
        return {"rc": code, "wall_s": round(time.monotonic() - t, 1), "sigint": sent or None}

    def job(self, name: str) -> None:
        kind, what = name.split("-")
        done = self.res / f"{name}.json"
        if done.exists():
            return
        timeout = self.left() - 25
        spec = self.work / f"{kind}.toml"
        cli = [sys.executable, "-m", "vllm_bisect.cli"]
        repo = self.work / "hist" / kind
        session = self.work / "sessions" / kind
        if what in ("rundef", "explain") or (
                what == "isolate" and (self.work / "sessions" / f"{kind}-def").exists()):
            session = self.work / "sessions" / f"{kind}-def"
        if what in ("rundef", "hookdef"):
            spec = self.work / f"{kind}-default.toml"
        doc: dict[str, object] = {"job": name}
        planted = json.loads((self.res / f"{kind}.planted.json").read_text())
        # explain/isolate without a finished bisect of this kind: the planted commit, the
        # default spec, a session of their own (`--spec FILE --culprit REF`)
        extra: list[str] = []
        if what in ("explain", "isolate") and not (session / "result.json").exists():
            session = self.work / "sessions" / f"{kind}-{what}"
            extra = ["--culprit", planted["planted"], "--spec",
                     str(self.work / f"{kind}-default.toml")]
        if what in ("mtpoff", "graphs"):
            session = self.work / "sessions" / f"{kind}-{what}"
            base = self.work / f"{kind}-default.toml"
            other = self.work / f"{kind}-{what}.toml"
            data = tomllib.loads(base.read_text())
            if what == "mtpoff":
                data["serve"].pop("speculative", None)
            else:
                data["serve"]["args"] = [a for a in data["serve"]["args"]
                                         if a != "--enforce-eager"]
            other.write_text(dump_spec(parse_spec(data, source=other.stem)))
            shutil.copy(other, self.res / other.name)
            parent = subprocess.run(["git", "rev-parse", f"{planted['planted']}^"], cwd=repo,
                                    capture_output=True, text=True, check=True).stdout.strip()
            code, wall = self.cmd([*cli, "explain", str(session), "--json", "--cache-dir",
                                   str(self.cache), "--spec", str(base), "--against",
                                   str(other), "--culprit", parent], repo, timeout, name)
            doc.update(rc=code, wall_s=round(wall, 1), commit=parent)
            self.trace_out(session, name)
            self.copy_out(session, name, "explain.json")
            doc.update(explain_counts(session))
            for f in (session / "explain" / "servers").glob("*.json"):
                shutil.copy(f, self.res / f"{name}_{f.name}")
        elif what == "explain":
            code, wall = self.cmd([*cli, "explain", str(session), "--json", "--cache-dir",
                                   str(self.cache), *extra], repo, timeout, name)
            doc.update(rc=code, wall_s=round(wall, 1), planted=planted["planted"])
            self.trace_out(session, name)
            self.copy_out(session, name, "report.md", "result.json", "explain.json")
            doc.update(explain_counts(session))
            prof = session / "explain"
            if prof.exists():
                for f in prof.rglob("*.json"):
                    if f.stat().st_size < 2_000_000 and "trace" not in f.name:
                        shutil.copy(f, self.res / f"{name}_{f.name}")
        elif what == "noise":
            argv = [sys.executable, str(Path(__file__).resolve().parent / "noise.py"),
                    str(self.work), str(self.res), "--budget-s", str(max(timeout, 1.0)),
                    "--spec", str(self.work / f"{kind}-cp.toml")]
            code, wall = self.cmd(argv, self.work, timeout + 20, name)
            doc.update(rc=code, wall_s=round(wall, 1))
            noise = self.res / "noise.json"
            if noise.exists():
                doc["noise"] = json.loads(noise.read_text())
        elif what in ("cp", "cpint"):
            spec = self.work / f"{kind}-cp.toml"
            session = self.work / "sessions" / f"{kind}-cp"
            argv = [*cli, "run", "--spec", str(spec), "--session", str(session),
                    "--cache-dir", str(self.cache), "--json"]
            cut_before = (self.res / f"{name}.cut.json").exists()
            if what == "cpint" and not (session / "journal.sqlite").exists() and not cut_before:
                first = self.interrupted(argv, repo, timeout, name, session / "journal.sqlite")
                doc["first_call"] = first
                (self.res / f"{name}.first.json").write_text(json.dumps(first, indent=2))
                timeout = self.left() - 25
                if timeout < 60:
                    doc.update(rc=-15, wall_s=first["wall_s"])
            elif (self.res / f"{name}.first.json").exists():
                doc["first_call"] = json.loads((self.res / f"{name}.first.json").read_text())
            finished = (session / "result.json").exists()
            if doc.get("rc") != -15 and not finished:
                if (session / "journal.sqlite").exists():  # the resume the interrupt printed
                    argv = [*cli, "run", "--session", str(session), "--cache-dir",
                            str(self.cache), "--json"]
                code, wall = self.cmd(argv, repo, timeout, name)
                doc.update(rc=code, wall_s=round(wall, 1))
            self.collect(doc, session, name, planted["planted"])
        elif what in ("run", "rundef"):
            code, wall = self.cmd([*cli, "run", "--spec", str(spec), "--session", str(session),
                                  "--cache-dir", str(self.cache), "--json"], repo, timeout, name)
            doc.update(rc=code, wall_s=round(wall, 1))
            self.collect(doc, session, name, planted["planted"])
            serve_logs = sorted((session / "logs").glob("serve-*.log"))
            if serve_logs and not (self.res / "serve_startup_full.log").exists():
                shutil.copy(serve_logs[0], self.res / "serve_startup_full.log")
        elif what in ("hook", "hookdef"):
            doc.update(self.hook(kind, spec, repo, timeout, name))
            doc["spec"] = spec.name
            doc["starts_by_phase"] = hook_starts(repo)
            first = doc.get("first_bad")
            doc["right"] = first[:12] == planted["planted"][:12] if isinstance(first, str) else None
            doc["planted"] = planted["planted"]
        else:
            code, wall = self.cmd([*cli, "isolate", str(session), "--no-hunks", "--no-deps",
                                   "--json", "--cache-dir", str(self.cache), *extra],
                                  repo, timeout, name)
            doc.update(rc=code, wall_s=round(wall, 1), planted=planted["planted"],
                       planted_file=planted.get("planted_file"))
            self.copy_out(session, name, "result.json", "isolate.json")
            # named the planted file, and only it? (isolate.json of a --culprit session, else
            # the study in the bisect session's result.json)
            study = None
            if (session / "isolate.json").exists():
                study = json.loads((session / "isolate.json").read_text())
            elif (session / "result.json").exists():
                study = json.loads((session / "result.json").read_text()).get("isolate")
            if isinstance(study, dict):
                found = study.get("minimal_files")
                doc.update(culprit=study.get("culprit"), minimal_files=found,
                           right=found == [planted.get("planted_file")],
                           tests=study.get("tests"), fresh_builds=study.get("fresh_builds"))
        if doc.get("rc") == -15:
            log(f"{name}: cut by the budget after {doc.get('wall_s')} s (resumes next call)")
            cut = self.res / f"{name}.cut.json"
            walls = json.loads(cut.read_text()).get("walls_s", []) if cut.exists() else []
            doc["walls_s"] = [*walls, doc.get("wall_s")]
            cut.write_text(json.dumps(doc, indent=2) + "\n")
            self.pack()
            return
        cut = self.res / f"{name}.cut.json"
        if cut.exists():  # the calls before this one that it resumed from
            doc["earlier_calls_wall_s"] = json.loads(cut.read_text()).get("walls_s", [])
        self.save(f"{name}.json", doc)
        log(f"{name}: rc {doc.get('rc')} in {doc.get('wall_s')} s")

    def hook(self, kind: str, spec: Path, repo: Path, timeout: float, name: str) -> dict[str, object]:
        shas = json.loads((self.res / f"{kind}.planted.json").read_text())["shas"]
        good, bad = shas[0], shas[-1]
        hook = [sys.executable, "-m", "vllm_bisect.cli", "hook", "--spec", str(spec),
                "--cache-dir", str(self.cache)]
        git = ["git", "-c", "advice.detachedHead=false"]
        if kind == "csrc":  # the compiled-change commits: the hook must skip (125), with a reason
            out: dict[str, object] = {}
            for label, sha in (("bad", bad),):
                subprocess.run([*git, "checkout", "-q", sha], cwd=repo, check=True)
                code, wall = self.cmd(hook, repo, timeout, name)
                out[label] = {"sha": sha, "rc": code, "wall_s": round(wall, 1)}
            subprocess.run([*git, "checkout", "-q", "main"], cwd=repo, check=True)
            return {"rc": out["bad"]["rc"], "at": out}  # type: ignore[index]
        subprocess.run([*git, "bisect", "reset"], cwd=repo, capture_output=True)
        subprocess.run([*git, "bisect", "start", bad, good], cwd=repo, check=True,
                       capture_output=True)
        code, wall = self.cmd([*git, "bisect", "run", *hook], repo, timeout, name)
        bisect_log = subprocess.run([*git, "bisect", "log"], cwd=repo, capture_output=True,
                                    text=True).stdout
        text = (self.res / f"{name}.log").read_text()
        first_bad = None
        for line in text.splitlines():
            if line.endswith("is the first bad commit"):
                first_bad = line.split()[0]
        subprocess.run([*git, "bisect", "reset"], cwd=repo, capture_output=True)
        steps = [ln for ln in text.splitlines() if ln.startswith("vllm-bisect: ")]
        return {"rc": code, "wall_s": round(wall, 1), "first_bad": first_bad,
                "hook_verdicts": steps, "bisect_log": bisect_log}

    def main(self, only: list[str]) -> None:
        self.stage_model()
        self.stage_histories({j.split("-")[0] for group in only for j in group.split("+")})
        for name in only:
            if self.left() < MIN_JOB_S:
                log(f"budget: {self.left():.0f} s left, stopping before {name}")
                break
            group = [threading.Thread(target=self.job, args=(j,)) for j in name.split("+")]
            for t in group:
                t.start()
            for t in group:
                t.join()
        self.pack()
        log("done")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--sdist", type=Path, required=True)
    ap.add_argument("--wheel", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--only", default=",".join(JOBS))
    ap.add_argument("--state", type=Path, default=None,
                    help="an earlier machine's OUT/state.tgz to resume from")
    ap.add_argument("--pack-only", action="store_true",
                    help="write OUT/results.tgz and OUT/state.tgz from WORK as it is now (while "
                         "another driver works on it: a snapshot to resume from) and stop")
    a = ap.parse_args()
    if a.pack_only:
        a.state = None
        Run(a).pack()
        return
    Run(a).main([j for j in a.only.split(",") if j])


if __name__ == "__main__":
    main()
