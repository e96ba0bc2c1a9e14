"""Signals (README, Reliability: signals). SIGINT, SIGTERM and SIGHUP (taken as
SIGTERM) during `mhe train` stop it after the step in progress: it writes a
checkpoint, says where and how to resume, and exits 130 (SIGINT) or 143; the
resumed run ends with the same file, byte for byte, as a run never stopped
(lm on a decoder, a masked-LM encoder and an encoder-decoder, cls and sr,
stopped at several steps by each signal). A second signal ends train at once.
A signal that lands inside a write (caught there: the test stops the process
with SIGSTOP the moment its TARGET.tmp.PID.N exists, sends the signal, and
lets it go on) removes the temporary file before the process dies, in every
command that writes; the old file stays as it was and loads. Other commands
die by the signal itself (the shell sees the same 130 or 143). Needs only
python3, a POSIX system and build/mhe."""
import glob
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import MHE, REPO, check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from clikit import leftovers, run, state  # noqa: E402

SIGS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 143}
NAME = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
DIED = {signal.SIGINT: -signal.SIGINT, signal.SIGTERM: -signal.SIGTERM, signal.SIGHUP: -signal.SIGTERM}
# a signal that lands before the handlers are installed (start-up is slow under an emulator) ends the process by itself
EARLY = {sig: -sig for sig in SIGS}


# under an emulator (MHE_TEST_RUNNER, e.g. qemu) each run costs ~100x, under the sanitizers ~7x: one signal
# per task, half the moments (the same handlers and write paths; make test runs every signal at every moment)
QUICK = bool(os.environ.get("MHE_TEST_RUNNER")) or os.environ.get("MHE_TEST_PYTHON") == "sanitize"

def default_sigint():
    """in the child before exec: a test run as a background job of sh (tests/run.sh's parallel jobs)
    inherits SIGINT ignored, and so would mhe until it installs its handler"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args):
    """mhe running args with SIGINT at its default (Popen returns once the child has exec'd): a suite
    run as a background job inherits SIGINT ignored, and a signal before mhe installs its handler was
    then lost (a train 'interrupted after 0 s' simply finished)"""
    return subprocess.Popen([MHE] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", preexec_fn=default_sigint)


def wait_step(p, k):
    """reads progress lines until step k is done; False if the run ended first"""
    for line in p.stdout:
        m = re.match(r"\s*step\s+(\d+)/", line)
        if m and int(m.group(1)) >= k:
            return True
    return False


def finish_run(p, timeout=300):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return -999, out, err + " (killed after %d s)" % timeout
    return p.returncode, out, err


def meta(path):
    import json
    import struct
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]).get("__metadata__", {})


def same_bytes(a, b):
    try:
        with open(a, "rb") as f, open(b, "rb") as g:
            return f.read() == g.read()
    except OSError:
        return False


def loads(path):
    """the file is a whole checkpoint: mhe inspect reads it"""
    rc, out, err = run("inspect", path)
    return rc == 0


def tasks(d):
    """(name, the train flags of a new model and run, the data flags) for every task"""
    text = os.path.join(d, "text.txt")
    with open(os.path.join(REPO, "examples", "data", "train.txt"), "rb") as f:
        body = f.read(40000)
    with open(text, "wb") as f:
        f.write(body)
    valid = os.path.join(d, "valid.txt")
    with open(valid, "wb") as f:
        f.write(body[:3000])
    tsv = os.path.join(d, "cls.tsv")
    with open(os.path.join(REPO, "examples", "data", "fortunes_train.tsv"), "rb") as f:
        lines = f.read().split(b"\n")[:120]
    with open(tsv, "wb") as f:
        f.write(b"".join(ln[:80] + b"\n" for ln in lines if ln))
    small = ["--d_model", 32, "--n_heads", 4, "--n_layers", 2, "--max_seq_len", 32, "--threads", 1]
    run_ = ["--steps", 30, "--batch", 8, "--seq_len", 32, "--log_every", 1, "--eval_every", 7, "--warmup", 5, "--schedule", "cosine"]
    hp = ["--embedding", "hash-pool", "--hash_bits", 24, "--hash_chunk", 6]
    return [
        ("lm decoder", ["--task", "lm"] + small + run_, ["--data", text, "--valid", valid]),
        ("lm encoder (masked LM)", ["--arch", "encoder"] + small + run_, ["--data", text, "--valid", valid]),
        ("lm encdec", ["--arch", "encdec", "--enc_layers", 1, "--src_len", 16] + small + run_, ["--data", text, "--valid", valid]),
        ("cls", ["--task", "cls", "--arch", "encoder"] + small + run_, ["--data", tsv, "--valid", tsv]),
        ("sr", ["--task", "sr"] + hp + small + run_, ["--data", text, "--valid", valid]),
    ]


def stop_and_resume(d):
    """each task stopped by each signal at another step, then resumed: the file of a run never stopped"""
    for ti, (name, flags, data) in enumerate(tasks(d)):
        ref = os.path.join(d, "ref%d.st" % ti)
        rc, out, err = run("train", *flags, *data, "--out", ref)
        if not check(rc == 0, "%s: the reference run: rc %d %s" % (name, rc, err[-300:])):
            continue
        for si, sig in enumerate(SIGS):
            if QUICK and si != ti % len(SIGS):
                continue
            k = (1, 9, 20)[(ti + si) % 3]
            ck = os.path.join(d, "stop%d_%d.st" % (ti, si))
            what = "%s, %s after step %d" % (name, NAME[sig], k)
            p = start(["train", *flags, *data, "--out", ck])
            if not check(wait_step(p, k), "%s: the run reached step %d" % (what, k)):
                finish_run(p)
                continue
            p.send_signal(sig)
            rc, out, err = finish_run(p)
            check(rc == STATUS[sig], "%s: exit status %d, want %d (%s)" % (what, rc, STATUS[sig], err[-300:]))
            m = re.search(r"stopped by %s at step (\d+) of 30: (\S+) holds the run" % NAME[sig], err)
            check(m and m.group(2) == ck and "mhe train --resume %s --out %s --data" % (ck, ck) in err,
                  "%s: says where it stopped and how to resume: %r" % (what, err[-400:]))
            check(not leftovers([d]), "%s: no temporary file: %s" % (what, leftovers([d])))
            if not check(os.path.exists(ck), "%s: the checkpoint was written" % what):
                continue
            saved = meta(ck)
            task = flags[1 + flags.index("--task")] if "--task" in flags else "lm"
            check(m is not None and saved.get("step") == m.group(1) and int(saved["step"]) >= k and saved.get("task") == task,
                  "%s: the checkpoint's step %s (the message's %s) and task %s" % (what, saved.get("step"), m and m.group(1), saved.get("task")))
            # the resumed run gets its task, settings and state from the file: no --task, no train flags
            rc, out, err = run("train", "--resume", ck, "--out", ck, *data, "--threads", 1)
            check(rc == 0 and same_bytes(ck, ref), "%s: the resumed run ends with the uninterrupted run's file (rc %d %s)"
                  % (what, rc, err[-300:]))


def catch_write(args, d, pattern, before=None, tries=12):
    """Runs mhe with args until one run is caught inside a write of a file matching pattern
    (d/PATTERN.tmp.*): the process is stopped there (SIGSTOP) and returned with the
    temporary file's path; before(p) runs first (e.g. waits for a step). None if never caught."""
    for _ in range(tries):
        p = start(args)
        if before and not before(p):
            finish_run(p)
            continue
        t_end = time.time() + 120
        while p.poll() is None and time.time() < t_end:
            tmp = glob.glob(os.path.join(d, pattern + ".tmp.*"))
            if tmp:
                os.kill(p.pid, signal.SIGSTOP)
                if os.path.exists(tmp[0]):
                    return p, tmp[0]
                os.kill(p.pid, signal.SIGCONT)
        finish_run(p)
        for t in glob.glob(os.path.join(d, "*.tmp.*")):
            os.remove(t)
    return None, None


def first_save(p, path):
    """waits until path exists (the run's first save is done); False if the run ended first"""
    while not os.path.exists(path):
        if p.poll() is not None:
            return False
        time.sleep(0.001)
    return True


def inside_writes(d):
    """signals caught inside the writes of every command that writes a file"""
    text = os.path.join(d, "text.txt")
    big = ["--d_model", 256, "--n_heads", 4, "--n_layers", 4, "--max_seq_len", 32]
    model = os.path.join(d, "big.st")
    rc, out, err = run("init", *big, "--out", model)
    if not check(rc == 0, "init of the large model: %s" % err):
        return
    train = ["train", "--model", model, "--data", text, "--steps", 400, "--batch", 2, "--seq_len", 8, "--save_every", 2,
             "--eval_every", 0, "--threads", 1, "--quiet"]
    # train, one signal inside a save: the save ends, the run stops there (exit 130/143), the file loads
    for sig in SIGS:
        ck = os.path.join(d, "bigck_%s.st" % NAME[sig])
        # a save while train steps (not the check of the output before it, which a signal ends at once)
        p, tmp = catch_write(train + ["--out", ck], d, os.path.basename(ck), lambda p: first_save(p, ck))
        if not check(p is not None, "train, %s inside a save: a save was caught" % NAME[sig]):
            continue
        p.send_signal(sig)
        os.kill(p.pid, signal.SIGCONT)
        rc, out, err = finish_run(p)
        check(rc == STATUS[sig] and "stopped by %s" % NAME[sig] in err, "train, %s inside a save: rc %d, %r" % (NAME[sig], rc, err[-300:]))
        check(not leftovers([d]) and loads(ck), "train, %s inside a save: no temporary file (%s), the checkpoint loads"
              % (NAME[sig], leftovers([d])))
    # train, a second signal (another one, so the two never merge) inside the save: it ends the
    # run at once, the temporary file removed, the previous checkpoint as it was
    for first, second in ((signal.SIGINT, signal.SIGTERM), (signal.SIGTERM, signal.SIGHUP), (signal.SIGHUP, signal.SIGINT)):
        ck = os.path.join(d, "bigck2_%s.st" % NAME[first])
        what = "train, %s then %s inside a save" % (NAME[first], NAME[second])
        caught = None
        for _ in range(8):
            # a later save: the first one is on disk
            if os.path.exists(ck):
                os.remove(ck)
            p, tmp = catch_write(train + ["--out", ck], d, os.path.basename(ck), lambda p: first_save(p, ck))
            if p is None:
                break
            old = state(ck)
            p.send_signal(first)
            os.kill(p.pid, signal.SIGCONT)
            time.sleep(0.002)
            os.kill(p.pid, signal.SIGSTOP)
            if not os.path.exists(tmp):   # the save ended before the second signal: try again
                os.kill(p.pid, signal.SIGKILL)
                finish_run(p)
                continue
            p.send_signal(second)
            os.kill(p.pid, signal.SIGCONT)
            caught = (p, old)
            break
        if not check(caught is not None, "%s: caught" % what):
            continue
        p, old = caught
        rc, out, err = finish_run(p)
        check(rc == DIED[second], "%s: ends at once by the signal (status %d, want %d): %r" % (what, rc, DIED[second], err[-300:]))
        check(not leftovers([d]), "%s: no temporary file left: %s" % (what, leftovers([d])))
        check(state(ck) == old and loads(ck), "%s: the previous checkpoint is as it was and loads" % what)
    # every other command that writes: the signal kills it inside the write; the old target stays
    gr = os.path.join(d, "tok.txt")
    with open(gr, "w") as f:
        f.write(" ".join(str(i % 200) for i in range(16)) + "\n")
    mha = os.path.join(d, "mha.st")
    rc, out, err = run("init", "--d_model", 256, "--n_heads", 8, "--n_layers", 2, "--max_seq_len", 32, "--out", mha)
    check(rc == 0, "init of the mha model: %s" % err)
    writers = [
        ("init", lambda out: ["init", *big, "--out", out], "st"),
        ("export .h", lambda out: ["export", "--model", model, "--out", out], "h"),
        ("export .safetensors", lambda out: ["export", "--model", model, "--out", out], "st"),
        ("export q8", lambda out: ["export", "--model", model, "--quant", "q8", "--out", out], "st"),
        ("grad", lambda out: ["grad", "--model", model, "--tokens", gr, "--out", out], "st"),
        ("reparam", lambda out: ["reparam", "--model", mha, "--dim", 64, "--max_iter", 3, "--tol", 1, "--out", out], "st"),
    ]
    for i, (name, args, ext) in enumerate(writers):
        sig = SIGS[i % 3]
        out = os.path.join(d, "w%d.%s" % (i, ext))
        with open(out, "w") as f:
            f.write("the old file\n")
        old = state(out)
        p, tmp = catch_write(args(out), d, os.path.basename(out))
        if not check(p is not None, "%s: a write was caught" % name):
            continue
        p.send_signal(sig)
        os.kill(p.pid, signal.SIGCONT)
        rc, _, err = finish_run(p)
        check(rc == DIED[sig], "%s, %s inside the write: dies by the signal (status %d, want %d) %r" % (name, NAME[sig], rc, DIED[sig], err[-200:]))
        check(not leftovers([d]), "%s, %s inside the write: no temporary file left: %s" % (name, NAME[sig], leftovers([d])))
        check(state(out) == old, "%s, %s inside the write: the old file is as it was" % (name, NAME[sig]))


def many_moments(d):
    """signals at many moments of export and train: whatever the moment, no temporary file; the
    target is the old file or a whole new one; train exits 130/143 or dies by the signal"""
    text = os.path.join(d, "text.txt")
    model = os.path.join(d, "big.st")
    out = os.path.join(d, "moments.h")
    delays = [0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6]
    if QUICK:
        delays = delays[::2]
    for i, delay in enumerate(delays):
        sig = SIGS[i % 3]
        if os.path.exists(out):
            os.remove(out)
        p = start(["export", "--model", model, "--out", out])
        time.sleep(delay)
        p.send_signal(sig)
        rc, _, err = finish_run(p)
        whole = rc == 0 and os.path.exists(out) and open(out).read().rstrip().endswith("};")
        check(whole or (rc in (DIED[sig], EARLY[sig]) and not os.path.exists(out)),
              "export .h, %s after %.2f s: rc %d, the target whole or absent" % (NAME[sig], delay, rc))
        check(not leftovers([d]), "export .h, %s after %.2f s: no temporary file: %s" % (NAME[sig], delay, leftovers([d])))
    ck = os.path.join(d, "moments.st")
    for i, delay in enumerate(delays):
        sig = SIGS[i % 3]
        p = start(["train", "--model", model, "--data", text, "--steps", 300, "--batch", 2, "--seq_len", 8, "--save_every", 3,
                   "--eval_every", 0, "--threads", 1, "--quiet", "--out", ck])
        time.sleep(delay)
        p.send_signal(sig)
        rc, _, err = finish_run(p)
        check(rc in (STATUS[sig], DIED[sig], EARLY[sig]), "train, %s after %.2f s: rc %d %r" % (NAME[sig], delay, rc, err[-200:]))
        check(not leftovers([d]), "train, %s after %.2f s: no temporary file: %s" % (NAME[sig], delay, leftovers([d])))
        if rc == STATUS[sig]:
            check(loads(ck), "train, %s after %.2f s: the checkpoint loads" % (NAME[sig], delay))


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_signals.py", why)
    if os.name != "posix":
        return skip("test_cli_signals.py", "POSIX signals")
    d = tmpdir("mhe_cli_signals_")
    stop_and_resume(d)
    inside_writes(d)
    many_moments(d)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
