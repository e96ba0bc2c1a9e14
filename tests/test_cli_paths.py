"""The mhe tool's output paths (docs/reliability.md, Output paths). Every file it
writes (checkpoints, exports, gradients, indicator CSV/SVG, params tables) goes
through one policy: a FIFO, device or directory is refused, a symlink is followed
and its target replaced atomically, an output that is one of the inputs is
refused, the output is checked before any work, temporary names are unique, and
a full disk or a file-size limit is an error with the system's reason that
leaves the old file as it was and no temporary file behind. Each case checks
the exit status, the message, and that no input or earlier output changed.
The full-disk cases need a small tmpfs (mount, as root); without one they are
skipped with the reason printed. Needs only python3 and build/mhe."""
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import MHE, RESULTS, check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from clikit import STEPS, expect, leftovers, run, setup, state  # noqa: E402


def not_regular(d, text, model, ckpt):
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    sub = os.path.join(d, "subdir")
    os.mkdir(sub)
    # a character device of our own (a copy of /dev/null's numbers) where mknod is allowed;
    # otherwise /dev/null itself, but only for a user who cannot replace it: a root without
    # mknod rights skips the device case (a broken build must never take the system's /dev/null)
    dev = os.path.join(d, "null_copy")
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        dev = "/dev/null" if os.geteuid() != 0 and not os.access("/dev", os.W_OK) else None
        if dev is None:
            print("SKIP the character-device output case: mknod refused and this user could replace /dev/null")
            RESULTS.skipped += 1
    tok = os.path.join(d, "tok.txt")
    with open(tok, "w") as f:
        f.write("1 2 3\n")
    for target, kind in ((fifo, "FIFO"), (dev, "character device"), (sub, "directory")):
        if target is None:
            continue
        keep = [target, text, model, ckpt]
        for args in (["export", "--model", model, "--out", target],
                     ["init", "--d_model", 16, "--n_heads", 2, "--out", target],
                     ["train", "--data", text, "--model", model, "--out", target] + STEPS,
                     ["grad", "--model", model, "--tokens", tok, "--out", target],
                     ["reparam", "--model", model, "--out", target, "--dim", 8]):
            expect(args, 1, [kind, "refused"], "%s --out %s" % (args[0], kind), keep=keep)
    if dev:
        st = os.stat(dev)
        check(stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3), "%s is still a character device (1, 3)" % dev)
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO is still a FIFO")
    # a symlink to a FIFO is judged by what it points to
    link = os.path.join(d, "to_fifo")
    os.symlink(fifo, link)
    expect(["export", "--model", model, "--out", link], 1, ["FIFO"], "--out symlink to a FIFO", keep=[link, fifo])
    loop = os.path.join(d, "loop")
    os.symlink(loop, loop)
    expect(["export", "--model", model, "--out", loop], 1, ["symlinks"], "--out a symlink loop", keep=[loop])
    # indicators: PREFIX.svg a directory stops the run before anything is written
    pre = os.path.join(d, "ind")
    os.mkdir(pre + ".svg")
    expect(["eval", "--model", model, "--data", text, "--seq_len", 8, "--batch", 2, "--batches", 1, "--indicators", pre], 1,
           ["ind.svg", "directory"], "--indicators with PREFIX.svg a directory", keep=[pre + ".svg", text, model],
           absent=[pre + ".csv", pre + "_maps.svg"])


def symlinks(d, text, model, ckpt):
    real_dir = os.path.join(d, "real")
    os.mkdir(real_dir)
    target = os.path.join(real_dir, "w.safetensors")
    with open(target, "w") as f:
        f.write("old")
    link = os.path.join(d, "w_link.safetensors")
    os.symlink(os.path.join("real", "w.safetensors"), link)   # relative: resolved from the link's directory
    code, out, err = run("export", "--model", ckpt, "--out", link)
    check(code == 0 and os.path.islink(link) and os.readlink(link) == os.path.join("real", "w.safetensors"),
          "export through a relative symlink: the link stays: rc %d %s" % (code, err))
    code, out2, err = run("inspect", target)
    check(code == 0 and "optim." not in out2, "the symlink's target holds the new weights: %s" % err)
    check(not leftovers([d, real_dir]), "no temporary file beside the link or the target")
    # a chain of two links, and a dangling one (its target is created)
    link2 = os.path.join(d, "w_link2")
    os.symlink(link, link2)
    code, out, err = run("init", "--d_model", 16, "--n_heads", 2, "--max_seq_len", 16, "--n_layers", 1, "--out", link2)
    check(code == 0 and os.path.islink(link2) and os.path.islink(link) and run("inspect", target)[0] == 0,
          "init through two symlinks updates the final target: %s" % err)
    dangling = os.path.join(d, "dangling.h")
    os.symlink(os.path.join(real_dir, "new.h"), dangling)
    code, out, err = run("export", "--model", ckpt, "--out", dangling, "--name", "tiny")
    check(code == 0 and os.path.islink(dangling) and "tiny_ARENA_BYTES" in open(os.path.join(real_dir, "new.h")).read(),
          "export through a dangling symlink creates its target: rc %d %s" % (code, err))


def inputs(d, text, model, ckpt):
    corpus = os.path.join(d, "corpus.txt")
    shutil.copy(text, corpus)
    hard = os.path.join(d, "corpus_hard.txt")
    os.link(corpus, hard)
    soft = os.path.join(d, "corpus_soft.txt")
    os.symlink(corpus, soft)
    keep = [corpus, hard, soft, model, ckpt]
    expect(["train", "--data", corpus, "--out", corpus] + STEPS, 1, ["--data", "refused"], "train --out = --data", keep=keep)
    expect(["train", "--data", corpus, "--out", hard] + STEPS, 1, ["--data", "refused"], "train --out a hard link of --data", keep=keep)
    expect(["train", "--data", corpus, "--out", soft] + STEPS, 1, ["--data", "refused"], "train --out a symlink to --data", keep=keep)
    expect(["train", "--data", text, "--valid", corpus, "--out", hard] + STEPS, 1, ["--valid"], "train --out = --valid", keep=keep)
    expect(["train", "--data", text, "--model", model, "--out", model] + STEPS, 1, ["--model"], "train --out = --model", keep=keep)
    expect(["export", "--model", model, "--out", model], 1, ["--model"], "export --out = --model", keep=keep)
    expect(["reparam", "--model", model, "--out", model, "--dim", 8], 1, ["--model"], "reparam --out = --model", keep=keep)
    cfg = os.path.join(d, "c.cfg")
    with open(cfg, "w") as f:
        f.write("d_model=16\nn_heads=2\n")
    expect(["init", "--config", cfg, "--out", cfg], 1, ["--config"], "init --out = --config", keep=keep + [cfg])
    tok = os.path.join(d, "tok.txt")
    with open(tok, "w") as f:
        f.write("1 2 3\n")
    expect(["grad", "--model", model, "--tokens", tok, "--out", tok], 1, ["--tokens"], "grad --out = --tokens", keep=keep + [tok])
    pre = os.path.join(d, "corpus_ind")
    shutil.copy(text, pre + ".csv")
    expect(["eval", "--model", model, "--data", pre + ".csv", "--seq_len", 8, "--indicators", pre], 1, ["--data"],
           "eval --indicators PREFIX.csv = --data", keep=[pre + ".csv", model], absent=[pre + ".svg", pre + "_maps.svg"])
    # continuing a run into its own checkpoint is how --resume works: allowed
    code, out, err = run("train", "--data", text, "--resume", ckpt, "--out", ckpt, "--steps", 3)
    check(code == 0 and "resumed" in out, "train --resume CK --out CK is allowed: %s" % err)


def before_work(d, text, model, ckpt):
    missing = os.path.join(d, "no_such_dir", "x.safetensors")
    t0 = time.time()
    out, err = expect(["train", "--data", text, "--out", missing, "--steps", 1000000, "--batch", 2, "--seq_len", 8], 1,
                      ["no_such_dir", "No such file or directory"], "train --out in a missing directory", keep=[text], timeout=20)
    check(time.time() - t0 < 20 and "step" not in out, "the missing directory is found before the first step (%.1f s)" % (time.time() - t0))
    expect(["eval", "--model", model, "--data", text, "--indicators", os.path.join(d, "no_such_dir", "p")], 1,
           ["No such file or directory"], "eval --indicators in a missing directory", keep=[text, model])


def concurrent(d, text, model):
    """Two trainers with one --out: unique temporary names, so both finish and leave one good file."""
    out = os.path.join(d, "shared.safetensors")
    args = [MHE, "train", "--data", text, "--model", model, "--out", out, "--steps", 24, "--batch", 1, "--seq_len", 8,
            "--eval_every", 0, "--save_every", 1, "--quiet"]
    args = [str(a) for a in args]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    res = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    check(all(r[2] == 0 for r in res), "two trainers on one --out both finish: %r" % [r[1][-200:] for r in res])
    check(run("inspect", out)[0] == 0 and not leftovers([d]), "one good checkpoint and no temporary file: %r" % leftovers([d]))


def limited(limit):
    """preexec_fn: a file-size limit, SIGXFSZ at its default action (the tool must ignore it itself)"""
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


def file_size_limit(d, text, model, ckpt):
    """ulimit -f: SIGXFSZ is an error (EFBIG) with a message, the old file stays, no .tmp is left."""
    if os.environ.get("MHE_TEST_RUNNER"):
        # the limit and the signal would be the emulator's (qemu-user), not the tool's
        print("SKIP file-size limit cases: under the emulator %s" % os.environ["MHE_TEST_RUNNER"])
        RESULTS.skipped += 1
        return
    old_h = os.path.join(d, "limit.h")
    with open(old_h, "w") as f:
        f.write("/* an earlier export */\n")
    old_ck = os.path.join(d, "limit.safetensors")
    shutil.copy(ckpt, old_ck)
    for args, target in ((["export", "--model", ckpt, "--out", old_h], old_h),
                         (["train", "--data", text, "--resume", old_ck, "--out", old_ck, "--steps", 6], old_ck)):
        before = state(target)
        p = subprocess.run([MHE] + [str(a) for a in args], capture_output=True, text=True, timeout=120, preexec_fn=limited(16384))
        check(p.returncode == 1 and "File too large" in p.stderr and "left unchanged" in p.stderr,
              "%s under a 16 KB file-size limit: rc %d (not killed by SIGXFSZ), %r" % (args[0], p.returncode, p.stderr.strip()[-300:]))
        check(state(target) == before and not leftovers([d]), "%s under a file-size limit: old file kept, no temporary file" % args[0])


def mount_tmpfs(where, size):
    """A small tmpfs at where (unmounted at exit), or the reason there is none."""
    os.mkdir(where)
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root: no tmpfs for the full-disk cases"
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", where], capture_output=True, text=True)
    if p.returncode != 0:
        return "mount -t tmpfs failed: %s" % p.stderr.strip()
    import atexit
    atexit.register(subprocess.run, ["umount", "-l", where], capture_output=True)
    return None


def full_disk(d, text, model, ckpt):
    mnt = os.path.join(d, "small")
    why = mount_tmpfs(mnt, 256 * 1024)
    if why:
        print("SKIP full-disk cases: %s" % why)
        RESULTS.skipped += 1
        return
    old_h, old_st, old_ck, pre = (os.path.join(mnt, n) for n in ("x.h", "x.safetensors", "ck.safetensors", "ind"))
    for p, body in ((old_h, b"/* an earlier export */\n"), (old_st, open(model, "rb").read()), (pre + ".csv", b"old,csv\n"),
                    (pre + ".svg", b"<svg/>"), (pre + "_maps.svg", b"<svg/>")):
        with open(p, "wb") as f:
            f.write(body)
    shutil.copy(ckpt, old_ck)
    # fill the disk up to 2 KB
    vfs = os.statvfs(mnt)
    with open(os.path.join(mnt, "filler"), "wb") as f:
        f.write(b"\0" * max(0, vfs.f_bavail * vfs.f_frsize - 2048))
    keep = [old_h, old_st, old_ck, pre + ".csv", pre + ".svg", pre + "_maps.svg"]
    for args, what in ((["export", "--model", ckpt, "--out", old_h], "export FILE.h"),
                       (["export", "--model", ckpt, "--out", old_st], "export FILE.safetensors"),
                       (["train", "--data", text, "--resume", old_ck, "--out", old_ck, "--steps", 6], "train checkpoint"),
                       (["eval", "--model", model, "--data", text, "--seq_len", 8, "--batch", 2, "--batches", 1, "--indicators", pre],
                        "eval --indicators")):
        out, err = expect(args, 1, ["No space left on device", "left unchanged"], "%s on a full disk" % what, keep=keep)
        check("wrote" not in out, "%s on a full disk says it wrote nothing: %r" % (what, out[-200:]))
    # params --out-dir: its tables too
    expect(["params", "--table", "4", "--out-dir", mnt], 1, ["No space left on device"], "params --out-dir on a full disk", keep=keep)
    # standard output is an output as well: help text redirected to the full disk
    with open(os.path.join(mnt, "stdout.txt"), "w") as so:
        p = subprocess.run([MHE, "init", "--help"], stdout=so, stderr=subprocess.PIPE, text=True, timeout=60)
    check(p.returncode == 1 and "cannot write to standard output: No space left on device" in p.stderr,
          "stdout on a full disk: rc %d %r" % (p.returncode, p.stderr))


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_paths.py", why)
    d = tmpdir("mhe_cli_paths_")
    text, model, ckpt = setup(d)
    not_regular(d, text, model, ckpt)
    symlinks(d, text, model, ckpt)
    inputs(d, text, model, ckpt)
    before_work(d, text, model, ckpt)
    concurrent(d, text, model)
    file_size_limit(d, text, model, ckpt)
    full_disk(d, text, model, ckpt)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
