#!/usr/bin/env bash
# Run one phase of `make test` (or `make demo`) and keep the reader informed.
#
# Usage:
#   bash hack/phase.sh <label> <what it does> <how long it usually takes> -- <command> [args…]
#
# It prints "==> [<label>] <what> (<usually>)" before the command, a line every
# $SANDGATE_PHASE_TICK seconds (default 60) while the command runs, saying how long
# it has run, and "    done in <duration>" or "    FAILED after <duration>" after it
# ("    interrupted after <duration>" when a Ctrl-C (SIGINT) reached it meanwhile:
# the command stopped because it was asked to, which is no failure to look into;
# it then exits with the command's status, or 130 if that was 0).
# All of its own lines go to stderr; the command's stdout stays stdout, so a phase
# whose output a caller captures (hack/docker/start.sh, hack/kube/build.sh) can be
# wrapped too. It exits with the command's status (130 for an interrupted command
# that exited 0).
set -uo pipefail

if (($# < 5)) || [[ $4 != -- ]]; then
  echo "usage: hack/phase.sh <label> <what> <usually> -- <command> [args…]" >&2
  exit 2
fi
label=$1 what=$2 usually=$3
shift 4
tick="${SANDGATE_PHASE_TICK:-60}"

human() {
  local s=$1
  if ((s < 60)); then echo "${s}s"; else printf '%dm%02ds\n' $((s / 60)) $((s % 60)); fi
}

echo "==> [$label] $what ($usually)" >&2
start=$SECONDS
(
  # The ticker: a subshell of this script, ended below by its own pid.
  sleeper=
  trap 'kill $sleeper 2>/dev/null; exit 0' TERM
  while :; do
    sleep "$tick" &
    sleeper=$!
    wait "$sleeper"
    echo "    … still $what: $(human $((SECONDS - start))) so far" >&2
  done
) &
ticker=$!
# A terminal's Ctrl-C reaches the whole process group, the command too; this
# script only notes it (bash waits for the command either way). SIGTERM keeps
# its default: make sends it to this script alone, which must not outlive it.
interrupted=
trap 'interrupted=1' INT
"$@"
status=$?
kill "$ticker" 2>/dev/null
wait "$ticker" 2>/dev/null
if [[ -n $interrupted ]]; then
  ((status != 0)) || status=130
  echo "    interrupted after $(human $((SECONDS - start))) (exit status $status)" >&2
elif ((status == 0)); then
  echo "    done in $(human $((SECONDS - start)))" >&2
else
  echo "    FAILED after $(human $((SECONDS - start))) (exit status $status)" >&2
fi
exit "$status"
