"""Every attention kind is in every implementation, or the gap is explained;
a kind is written in few places of mhe.h.

Reads the kinds from mhe.h (the enum and the kind table, which must agree
name for name) and looks for each one in: the CUDA companion's
mhe__cu_kinds (a row per kind), the PyTorch twin's ATTN_KINDS, test_cuda's two kind arrays,
the configurations of tests/torch_crosscheck.py and the KINDS of
tests/test_lockstep.py. A kind missing from one of them fails unless the table
"Kinds missing from an implementation" of docs/adding-a-kind.md has a row for
it with a reason; a row whose gap is closed fails too (the table stays true).
A kind of a family with more than one member is written in at most 5 places
of mhe.h (its enum value, its table row, each run of functions only its row
names, each other declaration naming its MHE_ATTN_ constant).
Every function docs/adding-a-kind.md names must exist where it says. The
headers include one way: mhe.h never includes mhe_cuda.cuh, and every mhe.h
internal (mhe__ function, type or MHE__ macro) the companion uses is listed
in mhe.h's companion-interface block, which lists nothing else. The
checks also run on altered copies of the sources (a kind dropped from each
place) to show that they fail. Needs only python3."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish  # noqa: E402

PLACES = ("cuda", "twin", "test_cuda", "crosscheck", "lockstep")


def read(path):
    return open(os.path.join(REPO, path), encoding="utf-8").read()


def enum_name(kind):
    """'mhe-add' -> 'MHE_ATTN_MHE_ADD'"""
    return "MHE_ATTN_" + kind.upper().replace("-", "_")


def header_kinds(header):
    """(kind names in the enum's order, names in the kind table's order)"""
    enum = header[header.index("MHE_ATTN_MHA = 0"):header.index("MHE_ATTN_KIND_COUNT")]
    enums = re.findall(r"^\s*(MHE_ATTN_\w+)", enum, re.M)
    table = header[header.index("static const mhe__kind_info mhe__kinds["):]
    table = table[:table.index("\n};")]
    names = re.findall(r"^\s*\{ \"([a-z-]+)\",", table, re.M)
    return enums, names


def found(sources, kinds):
    """{place: set of kinds it has}"""
    cuda = sources["cuda"]
    table = cuda[cuda.index("mhe__cu_kinds[MHE_ATTN_KIND_COUNT] = {"):]
    table = table[:table.index("\n};")]
    rows = set(re.findall(r"^\s*\{(MHE_ATTN_\w+),", table, re.M))
    twin = re.search(r"^ATTN_KINDS = \(([^)]*)\)", sources["twin"], re.M)
    twin_kinds = set(re.findall(r"\"([a-z-]+)\"", twin.group(1))) if twin else set()
    arrays = re.findall(r"static const int (?:device|decon)_kinds\[\] = \{([^}]*)\}", sources["test_cuda"])
    cross = set()
    for spec in re.findall(r"\b(?:attn|enc_attn|cross_attn)=\"([a-z,-]+)\"", sources["crosscheck"]):
        cross.update(spec.split(","))
    lock = re.search(r"^KINDS = \[(.*?)^\]", sources["lockstep"], re.M | re.S)
    lock_kinds = set(re.findall(r"\(\"([a-z-]+)\", \[", lock.group(1))) if lock else set()
    return {
        "cuda": {k for k in kinds if enum_name(k) in rows},
        "twin": twin_kinds,
        "test_cuda": {k for k in kinds if any(re.search(r"\b%s\b" % enum_name(k), a) for a in arrays)},
        "crosscheck": cross,
        "lockstep": lock_kinds,
    }


def gaps_table(doc):
    """{(kind, place): reason} from the table of docs/adding-a-kind.md"""
    at = doc.find("## Kinds missing from an implementation")
    rows = re.findall(r"^\| `?([a-z-]+)`? \| `?([a-z_]+)`? \| (.*?) \|$", doc[at:], re.M) if at >= 0 else []
    return {(k, p): r.strip() for k, p, r in rows if k != "kind"}


def problems(sources, doc):
    """the list of what is wrong: an empty list when every kind is everywhere or excused"""
    out = []
    enums, names = header_kinds(sources["header"])
    if [enum_name(n) for n in names] != enums:
        out.append("mhe.h: the kind table %s does not follow the enum %s" % (names, enums))
    have = found(sources, names)
    gaps = gaps_table(doc)
    for place in PLACES:
        for k in names:
            excused = gaps.get((k, place))
            if k not in have[place] and not excused:
                out.append("%s is missing from %s, and docs/adding-a-kind.md states no reason" % (k, place))
            if k in have[place] and excused is not None:
                out.append("docs/adding-a-kind.md says %s is missing from %s, but it is there" % (k, place))
        extra = have[place] - set(names)
        if extra and place != "crosscheck":   # the cross-check also tries unknown names, to see them refused
            out.append("%s names kinds mhe.h does not have: %s" % (place, sorted(extra)))
    for (k, place), reason in gaps.items():
        if place not in PLACES or k not in names or not reason:
            out.append("docs/adding-a-kind.md: the row (%s, %s) names no known kind/place or gives no reason"
                       % (k, place))
    return out


def units(header):
    """[(name, text)] of mhe.h's top-level declarations and definitions in file order, comments removed"""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), header, flags=re.S)
    out, cur, depth = [], None, 0
    for line in text.split("\n"):
        if cur is None:
            if not line.strip() or line[0].isspace() or line.startswith("#"):
                continue
            cur, depth = [], 0
        cur.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and line.rstrip().endswith((";", "}")):
            t = "\n".join(cur)
            head = t.split("{")[0]
            m = re.search(r"(\w+)\s*\(", head) or re.search(r"(\w+)\s*(?:\[[^]]*\])?\s*=", head) or \
                re.search(r"\}\s*(\w+)\s*;\s*$", t)
            out.append((m.group(1) if m else t[:30], t))
            cur = None
    return out

def kind_rows(header):
    """[(kind, family, set of mhe__ names in its row)] of mhe__kinds[]"""
    body = header[header.index("static const mhe__kind_info mhe__kinds["):]
    body = body[body.index("{") + 1:body.index("\n};")]
    rows = re.split(r"\n(?=\s*\{ \")", body.strip("\n"))
    out = []
    for r in rows:
        m = re.match(r'\s*\{ "([a-z-]+)", "(?:[^"\\]|\\.)*", (MHE__FAM_\w+)', r)
        out.append((m.group(1), m.group(2), set(re.findall(r"\b(mhe__\w+)\b", r))))
    return out

def kind_places(header):
    """{kind: (number of places, [what])}: where mhe.h writes a kind: its enum value, its row,
    each run of adjacent functions only its row names (its own), each other declaration naming it"""
    us = units(header)
    rows = kind_rows(header)
    named_by = {}
    for k, fam, names in rows:
        for n in names:
            named_by.setdefault(n, set()).add(k)
    out = {}
    for k, fam, names in rows:
        const = "MHE_ATTN_" + k.upper().replace("-", "_")
        own = {n for n in names if named_by[n] == {k}}
        what, run = ["enum", "row"], False
        for name, text in us:
            if name in own:
                if not run:
                    what.append("own: " + name)
                else:
                    what[-1] += "+" + name
                run = True
                continue
            run = False
            if name in ("mhe__kinds", "MHE_ATTN_MHA") or re.match(r"enum|typedef enum", text):
                continue
            if re.search(r"\b%s\b" % const, text) and not text.lstrip().startswith(("typedef enum", "enum")):
                what.append(name)
        out[k] = (len(what), what)
    return out


MAX_PLACES = 5   # a new kind in an existing family: docs/adding-a-kind.md


def places_problems(header):
    """kinds of a family with more than one member written in more than MAX_PLACES places of mhe.h"""
    rows = kind_rows(header)
    size = {}
    for _, fam, _ in rows:
        size[fam] = size.get(fam, 0) + 1
    fam_of = {k: fam for k, fam, _ in rows}
    return ["%s is written in %d places of mhe.h (at most %d): %s" % (k, n, MAX_PLACES, ", ".join(what))
            for k, (n, what) in kind_places(header).items() if size[fam_of[k]] > 1 and n > MAX_PLACES]


def companion_block(header):
    """(declared functions, names in the block's comment) of mhe.h's companion interface"""
    m = re.search(r"/\* companion interface +\*/\n(.*?)#endif /\* !MHE_NO_TRAIN \*/", header, re.S)
    if not m:
        return None, None
    body = m.group(1)
    comment, _, protos = body.partition("#ifndef MHE_NO_TRAIN")
    return set(re.findall(r"\b(mhe__\w+)\(", protos)), set(re.findall(r"\b(mhe__\w+|MHE__\w+)\b", comment))


def interface_problems(header, cuda):
    out = []
    if re.search(r'#\s*include\s*"mhe_cuda\.cuh"', header):
        out.append("mhe.h includes mhe_cuda.cuh")
    funcs, others = companion_block(header)
    if funcs is None:
        return out + ["mhe.h has no companion-interface block"]
    used = set(re.findall(r"\b(mhe__\w+|MHE__\w+)\b", cuda))
    # an mhe.h internal: defined in mhe.h (a function, type or macro), not in the companion;
    # the names each kind of definition can give, found in one pass over the header
    statics = {n for seg in re.findall(r"^static [^;{]*", header, re.M) for n in re.findall(r"\b(\w+)\(", seg)}
    others_defined = set(re.findall(r"^#define (\w+)", header, re.M)) | set(re.findall(r"\}\s*(\w+);", header)) | \
        set(re.findall(r"\(\*(\w+)\)", header)) | \
        {n for seg in re.findall(r"^typedef [^;]*", header, re.M) for n in re.findall(r"\b(\w+)\b", seg)}
    for n in sorted(used):
        if n not in statics and n not in others_defined:
            continue
        is_func = n in statics
        if is_func and n not in funcs:
            out.append("mhe_cuda.cuh calls %s, not declared in mhe.h's companion interface" % n)
        elif not is_func and n not in others:
            out.append("mhe_cuda.cuh uses %s, not named in mhe.h's companion interface" % n)
    for n in sorted(funcs - used):
        out.append("mhe.h's companion interface declares %s, which mhe_cuda.cuh does not call" % n)
    return out


def main():
    sources = {
        "header": read("mhe.h"), "cuda": read("mhe_cuda.cuh"), "twin": read("tools/python/mhe_torch.py"),
        "test_cuda": read("tests/cuda/test_cuda.cpp"), "crosscheck": read("tests/torch_crosscheck.py"),
        "lockstep": read("tests/test_lockstep.py"),
    }
    doc = read("docs/adding-a-kind.md")
    enums, names = header_kinds(sources["header"])
    check(len(names) == 17 and len(enums) == 17, "mhe.h has 17 kinds (enum %d, table %d)" % (len(enums), len(names)))
    found_now = problems(sources, doc)
    check(not found_now, "every kind is in every implementation and test, or excused: %s" % "; ".join(found_now))

    # the checks can fail: drop one kind from each place in turn
    drops = {
        "cuda": ("cuda", "{MHE_ATTN_TAYLOR,", "{/* no row */"),
        "twin": ("twin", "\"taylor\", \"nonapprox\",\n", "\"nonapprox\",\n"),
        "test_cuda": ("test_cuda", "MHE_ATTN_TAYLOR,", ""),
        "lockstep": ("lockstep", "(\"taylor\", []), ", ""),
    }
    for what, (src, old, new) in drops.items():
        altered = dict(sources)
        check(old in altered[src], "the altered copy for %s finds its text" % what)
        altered[src] = altered[src].replace(old, new, 1)
        p = problems(altered, doc)
        check(any("taylor is missing from %s" % what in x for x in p), "taylor dropped from %s is reported: %s" % (what, p))
        excused = doc + "| `taylor` | `%s` | a reason |\n" % what
        check(not problems(altered, excused), "the same gap with a stated reason passes")
    check(any("but it is there" in x for x in problems(sources, doc + "| `mha` | `twin` | stale |\n")),
          "an excuse for a gap that is closed is reported")
    renamed = dict(sources)
    renamed["header"] = renamed["header"].replace("{ \"sha\",", "{ \"shaa\",", 1)
    check(any("does not follow the enum" in x for x in problems(renamed, doc)), "a table row out of step with the enum is reported")
    cross = dict(sources)
    cross["crosscheck"] = re.sub(r"\b(attn|enc_attn|cross_attn)=\"([a-z,-]*)\bnonapprox\b",
                                 lambda m: m.group(0).replace("nonapprox", "mha"), cross["crosscheck"])
    check(any("nonapprox is missing from crosscheck" in x for x in problems(cross, doc)),
          "a kind without a cross-check configuration is reported")

    # a kind in an existing family: its enum value, its row, its own functions
    places = kind_places(sources["header"])
    check(not places_problems(sources["header"]), "every kind of a shared family is in at most %d places of mhe.h: %s"
          % (MAX_PLACES, "; ".join(places_problems(sources["header"])) or
             ", ".join("%s %d" % (k, n) for k, (n, _) in places.items())))
    check(places["mqa"][0] == 3 and "own: mhe__geom_mqa" in places["mqa"][1],
          "mqa is its enum value, its row and its geometry: %s" % (places["mqa"][1],))
    switched = sources["header"]
    for f in ("mhe__layer_geom", "mhe__attn_count", "mhe__layout_attn", "mhe__qkv_branch_fwd"):
        at = switched.index("{\n", re.search(r"^static [^;{]*\b%s\(" % f, switched, re.M).start()) + 2
        switched = switched[:at] + "    if (kind == MHE_ATTN_MQA) {}\n" + switched[at:]
    p = places_problems(switched)
    check(any(x.startswith("mqa is written in 7 places") for x in p), "a kind switched on in 4 functions is reported: %s" % p)

    # one-way headers: the companion calls only what the interface block declares
    p = interface_problems(sources["header"], sources["cuda"])
    check(not p, "mhe.h's companion interface and mhe_cuda.cuh's use agree: %s" % "; ".join(p))
    check(len(companion_block(sources["header"])[0]) >= 40, "the companion interface declares the functions it uses")
    extra = sources["cuda"].replace("mhe__n_enc(", "mhe__words_scan(", 1)
    check(any("mhe__words_scan, not declared" in x for x in interface_problems(sources["header"], extra)),
          "a call to an undeclared mhe.h internal is reported")
    check(any("declares mhe__n_enc" in x for x in interface_problems(sources["header"], extra.replace("mhe__n_enc", "x"))),
          "a declaration the companion no longer uses is reported")
    check(any("includes mhe_cuda.cuh" in x for x in
              interface_problems(sources["header"] + '\n#include "mhe_cuda.cuh"\n', sources["cuda"])),
          "mhe.h including the companion is reported")

    # every function the checklist names exists in the file of its section
    files = {"mhe.h": sources["header"], "mhe_cuda.cuh": sources["cuda"], "tools/python/mhe_torch.py": sources["twin"]}
    section_file, named = "mhe.h", []
    for line in doc.splitlines():
        m = re.match(r"#{2,3} (mhe\.h|mhe_cuda\.cuh|tools/python/mhe_torch\.py)", line)
        if m:
            section_file = m.group(1)
        elif line.startswith("## ") or line.startswith("### "):
            section_file = None
        if section_file:
            named += [(section_file, n) for n in re.findall(r"`(mhe_\w+|mhe__\w+|_attn|_decon|attention)`", line)]
    check(len(named) >= 30, "docs/adding-a-kind.md names %d functions" % len(named))
    for f, n in named:
        text = files[f]
        ok = re.search(r"\b%s\s*\(" % re.escape(n), text) or re.search(r"\b%s\b" % re.escape(n), text)
        if f == "tools/python/mhe_torch.py":
            ok = re.search(r"def %s\(" % re.escape(n), text)
        check(bool(ok), "%s names %s, which exists" % (f, n))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
