#!/usr/bin/env bash
# Issue 45 on the GPU machine: scripts/gpu/run_issue.sh with issue 45's tag (.whl/i45.tar.part*,
# I45_* env) and jobs. Copy both to .gpu/bin/ (git-ignored, carried); modes and usage:
# run_issue.sh. (Session 18 ran the script this replaced, with the same steps.)
ISSUE=45 ALL=host-rundef,host-hookdef,spec-rundef,spec-isolate,host-explain,host-graphs \
  exec bash "$(dirname "$0")/run_issue.sh" "$@"
