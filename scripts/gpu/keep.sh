#!/usr/bin/env bash
# After each device call, here: keep what came back and set up the next call.
#   bash .gpu/bin/keep.sh FILES_AT N     (FILES_AT: the reply's files_at; N: the call's number)
# state.tgz -> .gpu/state/state.tgz (carried by the next calls: a fresh machine resumes from it);
# every file -> .gpu/back/cN/ (results.tgz unpacked there: res/ = each job's JSON and log).
set -u
cd "$(dirname "$0")/../.." || exit 2
src=${1:?usage: keep.sh FILES_AT N}; n=${2:?usage: keep.sh FILES_AT N}
dest=.gpu/back/c$n
mkdir -p "$dest" .gpu/state
cp -r "$src"/. "$dest"/
if [ -f "$dest/state.tgz" ]; then
  cp "$dest/state.tgz" .gpu/state/state.tgz.new && mv .gpu/state/state.tgz.new .gpu/state/state.tgz
  echo "state: $(stat -c %s .gpu/state/state.tgz) bytes -> .gpu/state/state.tgz"
else
  echo "no state.tgz came back: .gpu/state/state.tgz kept as it was"
fi
[ -f "$dest/results.tgz" ] && tar -xzf "$dest/results.tgz" -C "$dest"
ls "$dest"
