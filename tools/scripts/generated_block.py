"""What the generators of mhe.h's tables share (unicode_classes.py,
wordpiece_tables.py): a block of generated text between two marker lines of
a file, printed, rewritten (--write) or compared (--check). Not a script."""
import sys


def update(path, start, end, text, argv, doc, stale):
    """argv[1:] empty: print text; --write: put it between the markers of path;
    --check: exit status 1 with `stale` said when path's block differs"""
    if len(argv) == 1:
        print(text)
        return 0
    src = open(path, encoding="utf-8").read()
    a, b = src.find(start), src.find(end)
    if a < 0 or b < 0:
        print("%s: the markers %r and %r are missing" % (path, start, end), file=sys.stderr)
        return 1
    new = src[:a] + text + src[b + len(end):]
    if argv[1] == "--check":
        if new != src:
            print(stale, file=sys.stderr)
            return 1
        return 0
    if argv[1] == "--write":
        if new != src:
            open(path, "w", encoding="utf-8").write(new)
        return 0
    print(doc)
    return 2
