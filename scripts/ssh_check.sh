#!/usr/bin/env bash
# A real check of dltop over SSH: a private sshd on 127.0.0.1, a real training writing its
# log and serving its live socket through the probe, and three ways of watching it, each in
# a tmux pane captured twice a few seconds apart (the header's step count must be there and
# grow), then quit with q:
#   1. ssh -t host 'dltop LOG'     the viewer on the host, following the log file;
#   2. ssh -t host 'dltop'         a bare dltop on the host attaches to the live socket;
#   3. ssh -L LOCAL:REMOTE.sock    the socket forwarded, watched by a local `dltop unix:LOCAL`
#      (the socket path comes from `dltop ls --json` over ssh).
# In 2 and 3 a connection to the run's socket must exist while the pane updates (via `ss`).
# Only loopback traffic; everything lives in a temp dir and is removed at the end (sshd, the
# tmux sessions, the forward, the training).
#
# Usage: scripts/ssh_check.sh            (from anywhere; the repository is found from here)
# Env:   DLTOP_SSH_NO_INSTALL=1  do not apt-get install openssh-server when sshd is missing
#        DLTOP_SSH_KEEP=1        keep the temp dir (logs, pane captures) for a post-mortem
# Exit:  0 passed, 1 failed, 77 skipped (sshd or tmux cannot be installed or run); the
#        last line says why.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY="$REPO/.venv/bin/python"
DLTOP="$REPO/.venv/bin/dltop"
SSHD=/usr/sbin/sshd
SESSION="dltop-ssh-check-$$"
WORK=""
SSHD_PID=""
TRAIN_PID=""
FWD_PID=""

log() { printf 'ssh_check: %s\n' "$*" >&2; }
skip() { log "SKIP: $*"; echo "SKIP: $*"; exit 77; }
fail() {
    log "FAIL: $*"
    if [[ -n "$WORK" ]]; then
        for f in "$WORK"/pane-*.txt "$WORK/sshd.log" "$WORK/train.err" "$WORK/ssh.err"; do
            [[ -s "$f" ]] && { log "---- $f"; tail -n 40 "$f" >&2; }
        done
    fi
    echo "FAIL: $*"
    exit 1
}

cleanup() {
    for s in log bare forward; do tmux kill-session -t "$SESSION-$s" 2>/dev/null; done
    [[ -n "$FWD_PID" ]] && kill "$FWD_PID" 2>/dev/null
    [[ -n "$TRAIN_PID" ]] && kill "$TRAIN_PID" 2>/dev/null
    [[ -n "$SSHD_PID" ]] && kill "$SSHD_PID" 2>/dev/null
    [[ -n "$TRAIN_PID" ]] && wait "$TRAIN_PID" 2>/dev/null
    [[ -n "$SSHD_PID" ]] && wait "$SSHD_PID" 2>/dev/null
    if [[ -n "$WORK" && -z "${DLTOP_SSH_KEEP:-}" ]]; then
        rm -rf "$WORK"
    elif [[ -n "$WORK" ]]; then
        log "kept $WORK"
    fi
}
trap cleanup EXIT

# ---- prerequisites ------------------------------------------------------------------------
[[ -x "$PY" && -x "$DLTOP" ]] || skip "no $REPO/.venv with dltop installed"
command -v tmux >/dev/null || skip "tmux is not installed"
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null || NEED_INSTALL=1
if [[ ! -x "$SSHD" || -n "${NEED_INSTALL:-}" ]]; then
    [[ -n "${DLTOP_SSH_NO_INSTALL:-}" ]] && skip "sshd is not installed (DLTOP_SSH_NO_INSTALL set)"
    [[ $(id -u) -eq 0 ]] || skip "sshd is not installed and we are not root to apt-get it"
    command -v apt-get >/dev/null || skip "sshd is not installed and there is no apt-get"
    log "installing openssh-server"
    export DEBIAN_FRONTEND=noninteractive
    # bounded: without a network apt-get can wait a long time
    if ! timeout 180 apt-get install -y --no-install-recommends openssh-server >/dev/null 2>&1; then
        timeout 180 apt-get update >/dev/null 2>&1
        timeout 180 apt-get install -y --no-install-recommends openssh-server >/dev/null 2>&1 ||
            skip "apt-get install openssh-server failed (no network or no apt sources?)"
    fi
    [[ -x "$SSHD" ]] || skip "openssh-server installed but $SSHD is missing"
fi

# ---- a private sshd on 127.0.0.1 ------------------------------------------------------------
WORK=$(mktemp -d /tmp/dltop-ssh.XXXXXX)
chmod 700 "$WORK"
mkdir -p /run/sshd 2>/dev/null  # sshd's privilege-separation directory
ssh-keygen -q -t ed25519 -N '' -f "$WORK/host_key" || fail "ssh-keygen (host key)"
ssh-keygen -q -t ed25519 -N '' -f "$WORK/client_key" || fail "ssh-keygen (client key)"
cp "$WORK/client_key.pub" "$WORK/authorized_keys"
chmod 600 "$WORK/authorized_keys"
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
USER_NAME=$(id -un)
cat >"$WORK/sshd_config" <<EOF
ListenAddress 127.0.0.1:$PORT
HostKey $WORK/host_key
PidFile $WORK/sshd.pid
AuthorizedKeysFile $WORK/authorized_keys
AllowUsers $USER_NAME
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
EOF
"$SSHD" -t -f "$WORK/sshd_config" 2>"$WORK/sshd.log" || skip "sshd refuses its config: $(tail -n1 "$WORK/sshd.log")"
"$SSHD" -D -e -f "$WORK/sshd_config" 2>>"$WORK/sshd.log" &
SSHD_PID=$!

SSH=(ssh -F /dev/null -p "$PORT" -i "$WORK/client_key" -o IdentitiesOnly=yes
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
    -o BatchMode=yes -o ConnectTimeout=5)
ok=""
for _ in $(seq 1 50); do  # up to ~10 s for sshd to listen
    kill -0 "$SSHD_PID" 2>/dev/null || skip "sshd exited at start: $(tail -n1 "$WORK/sshd.log")"
    if "${SSH[@]}" "$USER_NAME@127.0.0.1" true 2>>"$WORK/ssh.err"; then
        ok=1
        break
    fi
    sleep 0.2
done
[[ -n "$ok" ]] || skip "cannot log in to the private sshd: $(tail -n1 "$WORK/ssh.err")"
log "sshd on 127.0.0.1:$PORT accepts our key"

# ---- a real training, writing its log through the probe -----------------------------------
LOG="$WORK/run.jsonl"
cat >"$WORK/train.py" <<'EOF'
"""A small real training with the probe, paced so a viewer sees the step count move."""
import sys
import time

import torch
from dltop.probe import Probe

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(256, 16), torch.randn(256, 1)
with Probe(path=sys.argv[1], model=model, optimizer=opt) as probe:
    for i in range(3000):  # bounded: ~2.5 min at most, killed by the check long before
        idx = torch.randint(0, 256, (32,))
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        probe.step(loss=loss)
        time.sleep(0.05)
EOF
XDG="$WORK/xdg"  # the run's rendezvous dir, shared with the remote viewer (see docs/live.md)
mkdir -m 700 "$XDG" "$WORK/empty"
XDG_RUNTIME_DIR="$XDG" "$PY" "$WORK/train.py" "$LOG" 2>"$WORK/train.err" &
TRAIN_PID=$!
for _ in $(seq 1 100); do  # the log exists once the probe has written meta and a step or two
    [[ -s "$LOG" ]] && [[ $(wc -l <"$LOG") -ge 3 ]] && break
    kill -0 "$TRAIN_PID" 2>/dev/null || fail "the training exited early: $(tail -n1 "$WORK/train.err")"
    sleep 0.2
done
[[ -s "$LOG" ]] || fail "the training wrote no log at $LOG"
log "training pid $TRAIN_PID writing $LOG"

# ---- watching in tmux ----------------------------------------------------------------------------
# watch NAME CMD...: run CMD in a detached tmux pane, capture it twice a few seconds apart,
# require the header's "step N" to be there and to grow, then send q and require CMD to end
# with status 0. Sets FIRST and SECOND.
watch() {
    local name=$1 session="$SESSION-$1" first="" second="" quit=""
    shift
    tmux new-session -d -s "$session" -x 120 -y 40 \
        "$(printf '%q ' "$@"); echo cmd-exit=\$?; sleep 30" || skip "tmux cannot start a session"
    pane() { tmux capture-pane -p -t "$session" >"$WORK/pane-$name-$1.txt" 2>/dev/null; }
    step_of() {  # from the header line only ("dltop RUN  host:pid  status ... step N ...")
        grep -m1 -E '^ ?dltop ' "$WORK/pane-$name-$1.txt" | grep -oE ' step [0-9]+' | tr -dc '0-9'
    }
    for _ in $(seq 1 60); do  # up to ~30 s for ssh + Textual to start and draw
        pane 1
        first=$(step_of 1)
        [[ -n "$first" ]] && break
        sleep 0.5
    done
    [[ -n "$first" ]] || fail "$name: the viewer never showed a step count (see pane-$name-1.txt)"
    sleep 4
    for _ in $(seq 1 10); do
        pane 2
        second=$(step_of 2)
        [[ -n "$second" && "$second" -gt "$first" ]] && break
        sleep 0.5
    done
    [[ -n "$second" ]] || fail "$name: the step count vanished from the pane (pane-$name-2.txt)"
    [[ "$second" -gt "$first" ]] || fail "$name: the step count did not grow: $first then $second"
    if [[ -n "${SOCK_CHECK:-}" ]]; then  # streaming from the socket, not reading the file
        if command -v ss >/dev/null; then
            ss -xH | grep -qF -- "$SOCK_CHECK" || fail "$name: nothing is connected to $SOCK_CHECK"
        else
            log "$name: no ss (iproute2) here: the socket connection is not checked"
        fi
    fi
    log "$name, pane 1: $(grep -m1 -E '^ ?dltop ' "$WORK/pane-$name-1.txt")"
    log "$name, pane 2: $(grep -m1 -E '^ ?dltop ' "$WORK/pane-$name-2.txt")"
    tmux send-keys -t "$session" q
    for _ in $(seq 1 40); do  # the pane's shell prints the exit status once dltop has quit
        pane 3
        quit=$(grep -oE 'cmd-exit=[0-9]+' "$WORK/pane-$name-3.txt" | head -n1)
        [[ -n "$quit" ]] && break
        sleep 0.25
    done
    tmux kill-session -t "$session" 2>/dev/null
    [[ -n "$quit" ]] || fail "$name: dltop did not quit on q (see pane-$name-3.txt)"
    [[ "$quit" == "cmd-exit=0" ]] || fail "$name: ended with ${quit#cmd-}, not 0"
    FIRST=$first SECOND=$second
}

TARGET="$USER_NAME@127.0.0.1"
ENV_REMOTE="XDG_RUNTIME_DIR='$XDG' TEXTUAL_COLOR_SYSTEM=256"
RESULTS=()

# 1. ssh -t host 'dltop LOG': the viewer runs on the host and follows the log file
watch log "${SSH[@]}" -t "$TARGET" "cd '$REPO' && exec .venv/bin/dltop '$LOG'"
RESULTS+=("ssh -t dltop LOG: step $FIRST then $SECOND")

# the run's socket, as `dltop ls` over ssh lists it
REMOTE_SOCK=$("${SSH[@]}" "$TARGET" "cd '$REPO' && $ENV_REMOTE .venv/bin/dltop ls --json" |
    "$PY" -c 'import json, sys; print(next(r["source"][5:] for r in map(json.loads, sys.stdin) if r["live"]))') ||
    fail "dltop ls over ssh did not list the live run"
SOCK_CHECK=$REMOTE_SOCK

# 2. ssh -t host dltop: a bare dltop on the host attaches to the live run's socket
watch bare "${SSH[@]}" -t "$TARGET" "cd '$REPO' && $ENV_REMOTE exec .venv/bin/dltop"
RESULTS+=("ssh -t dltop (live socket): step $FIRST then $SECOND")

# 3. the run's Unix socket forwarded with ssh -L, watched by a local dltop
FWD="$WORK/fwd.sock"
"${SSH[@]}" -N -o StreamLocalBindUnlink=yes -o ExitOnForwardFailure=yes \
    -L "$FWD:$REMOTE_SOCK" "$TARGET" 2>>"$WORK/ssh.err" &
FWD_PID=$!
for _ in $(seq 1 50); do
    [[ -S "$FWD" ]] && break
    kill -0 "$FWD_PID" 2>/dev/null || fail "ssh -L of the socket failed: $(tail -n1 "$WORK/ssh.err")"
    sleep 0.2
done
[[ -S "$FWD" ]] || fail "ssh -L never created $FWD"
watch forward env XDG_RUNTIME_DIR="$WORK/empty" "$DLTOP" "unix:$FWD"
RESULTS+=("ssh -L socket + local dltop unix:LOCAL: step $FIRST then $SECOND")
kill "$FWD_PID" 2>/dev/null
wait "$FWD_PID" 2>/dev/null
FWD_PID=""

echo "PASS: dltop over ssh (127.0.0.1:$PORT): ${RESULTS[*]/%/;} each quit on q"
exit 0
