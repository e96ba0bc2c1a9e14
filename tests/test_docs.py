"""The documentation holds together: every relative link and #anchor in
README.md and docs/*.md resolves (the file exists; the anchor is a heading of
that file under GitHub's slug rules, or an explicit <a id>), every docs page
is reachable from the README by links, every page opens with a summary and a
link back to the README, and the README stays a front door (at most 400
lines). Needs only python3.

    python3 tests/test_docs.py [FILE.md ...]   check these files instead (the
                                               README-length and reachability
                                               checks then apply to them alone)
"""
import os
import re
import sys
import unicodedata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish  # noqa: E402

MAX_README_LINES = 400
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose(text):
    """the lines outside fenced code blocks (fenced lines blanked, so line numbers stay)"""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return out


def slug(heading):
    """GitHub's anchor for a heading (github-slugger): the text as rendered, lower-cased, every
    character but letters, marks, numbers, connector punctuation, spaces and hyphens dropped,
    spaces made hyphens"""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML tags
    text = text.replace("`", "").lower()
    keep = [c for c in text if c in " -" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"]
    return "".join(keep).replace(" ", "-")


def anchors(path):
    """every anchor a Markdown file offers: its headings' slugs (repeats numbered -1, -2, ... as
    GitHub does) and explicit <a id="..."> targets"""
    found, seen = set(), {}
    raw = open(path, encoding="utf-8").read()
    for line in prose(raw):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else "%s-%d" % (s, n))
    for line in raw.split("\n"):
        found.update(ANCHOR.findall(line))
    return found


def links(path):
    """(line number, target) of every link and image in a Markdown file, outside code"""
    out = []
    for i, line in enumerate(prose(open(path, encoding="utf-8").read()), 1):
        for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):   # a link inside `code` is not a link
            out.append((i, target))
    return out


def relative(target):
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)


def check_links(files):
    """every relative link of files resolves; returns {file: files it links to}"""
    cache, graph, bad = {}, {}, []
    for f in files:
        graph[f] = set()
        for line, target in links(f):
            if not relative(target):
                continue
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            where = "%s:%d: %s" % (os.path.relpath(f, REPO), line, target)
            if not os.path.exists(dest):
                bad.append(where + " (no such file)")
                continue
            graph[f].add(dest)
            if frag:
                if not dest.endswith(".md"):
                    bad.append(where + " (an anchor into a file that is not Markdown)")
                    continue
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if frag not in cache[dest]:
                    bad.append(where + " (no heading or anchor '%s' there)" % frag)
    check(not bad, "every relative link and anchor resolves (%d links in %d files): %s" % (
        sum(len(links(f)) for f in files), len(files), "; ".join(bad) if bad else "all"))
    return graph


def main():
    docs = os.path.join(REPO, "docs")
    readme = os.path.join(REPO, "README.md")
    given = [os.path.abspath(a) for a in sys.argv[1:]]
    pages = sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    files = given or [readme] + pages

    # the slug rules themselves, on headings this documentation uses
    check(slug("Encoders, encoder–decoder models, classification") == "encoders-encoderdecoder-models-classification"
          and slug("The `mhe` tool") == "the-mhe-tool" and slug("5. The attention math that makes MHE fast")
          == "5-the-attention-math-that-makes-mhe-fast" and slug("Word models: hash embeddings, Shuffle+Random")
          == "word-models-hash-embeddings-shufflerandom", "GitHub's slug rules")

    graph = check_links(files)
    if given:
        return finish()

    # every page reachable from the README, following links
    seen, todo = {readme}, [readme]
    while todo:
        for dest in graph.get(todo.pop(), ()):
            if dest.endswith(".md") and dest not in seen and dest in graph:
                seen.add(dest)
                todo.append(dest)
    lost = [os.path.relpath(p, REPO) for p in pages if p not in seen]
    check(not lost, "every docs page is reachable from README.md: unreachable %s" % lost)
    direct = {d for d in graph[readme]}
    check(os.path.join(docs, "README.md") in direct, "README.md links the docs index docs/README.md")

    # every page: a title, then a summary paragraph, and a link back to the README
    for p in pages:
        text = open(p, encoding="utf-8").read()
        paras = [x.strip() for x in re.split(r"\n\s*\n", text) if x.strip()]
        name = os.path.relpath(p, REPO)
        check(len(paras) >= 2 and paras[0].startswith("# ") and not paras[1].startswith(("#", "|", "```", "-")),
              "%s opens with a title and a summary paragraph" % name)
        check(readme in graph[p], "%s links back to the README" % name)

    # the index names every page once
    index = open(os.path.join(docs, "README.md"), encoding="utf-8").read()
    listed = re.findall(r"^- \[[^\]]+\]\(([^)#]+\.md)\)", index, re.M)
    want = sorted(os.path.basename(p) for p in pages if os.path.basename(p) != "README.md")
    check(sorted(listed) == want, "docs/README.md lists every page once, one line each: listed %s, pages %s" % (
        sorted(listed), want))

    n = open(readme, encoding="utf-8").read().count("\n")
    check(n <= MAX_README_LINES, "README.md has %d lines (at most %d)" % (n, MAX_README_LINES))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
