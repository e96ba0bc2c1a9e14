#!/usr/bin/env python3
"""Compare ptxas's resource report with the checked-in kernel budget.

usage: cuda_budget.py PTXAS_LOG BUDGET            fail when a kernel is over budget
       cuda_budget.py PTXAS_LOG BUDGET --table    the kernel table of docs/cuda.md (markdown)
       cuda_budget.py PTXAS_LOG BUDGET --update FILE   rewrite that table in FILE between
                                                  its cuda-kernels markers (make docs)
       cuda_budget.py PTXAS_LOG --write BUDGET    write a budget from a report

PTXAS_LOG is what `nvcc -Xptxas -v` printed while building the kernels
(make cuda keeps it in build/cuda/ptxas.log). BUDGET (tools/scripts/cuda_budget.txt)
has one line per kernel and architecture: name, arch, registers, shared
bytes. A kernel fails when it uses more registers or static shared memory
than its line allows, spills or uses local memory at all, or has no line
(a new kernel gets a budget on purpose, not by accident).
"""
import re
import subprocess
import sys

START, END = "<!-- cuda-kernels:start -->", "<!-- cuda-kernels:end -->"


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return [re.sub(r"^void ", "", re.sub(r"\(.*", "", x)) for x in out.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        return names


def parse(path):
    """{(kernel, arch): dict(regs, smem, spill, stack)} from a ptxas -v log"""
    kernels, cur = {}, None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'", line)
        if m:
            cur = (m.group(1), m.group(2))
            kernels[cur] = {"regs": 0, "smem": 0, "spill": 0, "stack": 0}
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            kernels[cur]["stack"] = int(m.group(1))
            kernels[cur]["spill"] = int(m.group(2)) + int(m.group(3))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            kernels[cur]["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            kernels[cur]["smem"] = int(s.group(1)) if s else 0
    names = sorted({k for k, _ in kernels})
    pretty = dict(zip(names, demangle(names)))
    return {(pretty[k], a): v for (k, a), v in kernels.items()}


def read_budget(path):
    budget = {}
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, arch, regs, smem = line.rsplit(None, 3)
        budget[(name, arch)] = (int(regs), int(smem))
    return budget


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    report = parse(argv[1])
    if not report:
        print("cuda_budget: no kernels in %s" % argv[1])
        return 1
    if argv[2] == "--write":
        with open(argv[3], "w", encoding="utf-8") as f:
            f.write("# kernel  arch  max-registers  max-static-shared-bytes (tools/scripts/cuda_budget.py; spills must be 0)\n")
            for (name, arch), v in sorted(report.items()):  # registers: room for compiler drift, up to the next 8
                f.write("%s  %s  %d  %d\n" % (name, arch, (v["regs"] + 7) // 8 * 8, v["smem"]))
        return 0
    budget = read_budget(argv[2])
    if "--table" in argv or "--update" in argv:  # one row per kernel, the architectures side by side
        archs = sorted({a for _, a in report})
        rows = ["| kernel | " + " | ".join("%s registers (budget)" % a for a in archs) + " | static shared bytes | spills |",
                "| --- |" + " --- |" * (len(archs) + 2)]
        for name in sorted({k for k, _ in report}):
            regs = []
            for a in archs:
                v, b = report.get((name, a)), budget.get((name, a), ("-", "-"))
                regs.append("%d (%s)" % (v["regs"], b[0]) if v else "-")
            vs = [report[(name, a)] for a in archs if (name, a) in report]
            rows.append("| `%s` | %s | %d | %d |" % (name, " | ".join(regs), max(v["smem"] for v in vs),
                                                    sum(v["spill"] for v in vs)))
        if "--table" in argv:
            print("\n".join(rows))
            return 0
        path = argv[argv.index("--update") + 1]
        text = open(path, encoding="utf-8").read()
        if text.count(START) != 1 or text.count(END) != 1:
            print("cuda_budget: %s needs one %s and one %s marker" % (path, START, END))
            return 1
        new = text[:text.index(START)] + "\n".join([START, ""] + rows + ["", END]) + text[text.index(END) + len(END):]
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print("cuda_budget: rewrote the kernel table in %s" % path)
        return 0
    bad = 0
    for (name, arch), v in sorted(report.items()):
        b = budget.get((name, arch))
        why = []
        if b is None:
            why.append("no budget line")
        else:
            if v["regs"] > b[0]:
                why.append("%d registers > %d" % (v["regs"], b[0]))
            if v["smem"] > b[1]:
                why.append("%d shared bytes > %d" % (v["smem"], b[1]))
        if v["spill"] or v["stack"]:
            why.append("%d bytes spilled, %d bytes stack" % (v["spill"], v["stack"]))
        if why:
            bad += 1
            print("cuda_budget: %s (%s): %s" % (name, arch, "; ".join(why)))
    print("cuda_budget: %d kernel builds checked, %d over budget" % (len(report), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
