"""The Unicode data of a named version for the generators of mhe.h's tables
(unicode_classes.py, wordpiece_tables.py): read from the source archive of the
`unicodedata2` package on PyPI, which carries each Unicode version's data as
CPython's generated tables (unicodedata_db.h: general category, canonical
combining class, decomposition; unicodetype_db.h: case mappings, which the
module itself does not expose). Reading the archive, not importing the module,
lets one Python use any version (unicodedata2 8.0.0 builds only on Python 2).
Not a script.

The archives are pinned by name and SHA-256 (PINNED) and kept in build/unicode/
(or $MHE_UNICODE_DIR); fetch() downloads the missing ones with pip."""
import hashlib
import os
import re
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.environ.get("MHE_UNICODE_DIR") or os.path.join(ROOT, "build", "unicode")

# Unicode version -> (unicodedata2 release, its source archive, SHA-256 of that archive)
PINNED = {
    "8.0.0": ("8.0.0", "unicodedata2-8.0.0.tar.gz", "83ade023678f55a35650cd12213c9fd8b38e2af90d4a8c71ce92a04e609e95c2"),
    "9.0.0": ("9.0.0.post4", "unicodedata2-9.0.0.post4.tar.gz", "ef277bdec37f276829d0c249bda3447642c72248b697f2eea7a7c442dd4820d9"),
    "16.0.0": ("16.0.0", "unicodedata2-16.0.0.tar.gz", "05488d6592b59cd78b61ec37d38725416b2df62efafa6a0d63a631b27aa474fc"),
    "17.0.0": ("17.0.1", "unicodedata2-17.0.1.tar.gz", "d79943d153f5f6bfbe3f55a5ec611985184bda37fcedb3ecc75322d82ae6ad3b"),
}

# PropList.txt's White_Space, unchanged since Unicode 6.3 (unicodedata2 does not carry PropList)
WHITE_SPACE = frozenset(list(range(0x09, 0x0E)) + [0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B)) +
                        [0x2028, 0x2029, 0x202F, 0x205F, 0x3000])
EXTENDED_CASE = 0x4000   # unicodetype_db.h: the case fields index _PyUnicode_ExtendedCase


def path(version):
    return os.path.join(DIR, PINNED[version][1])


def missing(versions):
    """the versions whose archive is not in DIR"""
    return [v for v in versions if not os.path.exists(path(v))]


def fetch(versions):
    """download the missing archives with pip (source archives, no build) and check their SHA-256"""
    os.makedirs(DIR, exist_ok=True)
    for v in missing(versions):
        release = PINNED[v][0]
        print("fetching unicodedata2 %s (Unicode %s) into %s" % (release, v, DIR), file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "unicodedata2==" + release, "-d", DIR], check=True)
    for v in versions:
        digest = hashlib.sha256(open(path(v), "rb").read()).hexdigest()
        if digest != PINNED[v][2]:
            raise SystemExit("%s: SHA-256 %s, not the pinned %s" % (path(v), digest, PINNED[v][2]))


def _arrays(src):
    """{name: list of ints, or of int tuples} for every `name[] = {...};` of a generated header,
    the string arrays as lists of strings, and the #define'd numbers"""
    out = {}
    for m in re.finditer(r"(\w+)\[\] = \{(.*?)\};", src, re.S):
        body = m.group(2)
        if '"' in body:
            out[m.group(1)] = re.findall(r'"([^"]*)"', body)
        elif "{" in body:
            try:   # (the tables of numeric values hold floats: not needed)
                out[m.group(1)] = [tuple(int(x) for x in r.split(",")) for r in re.findall(r"\{([^{}]*)\}", body)]
            except ValueError:
                pass
        else:
            out[m.group(1)] = [int(x) for x in re.findall(r"-?\d+", body)]
    for m in re.finditer(r"#define (\w+) (\d+)\s", src):
        out[m.group(1)] = int(m.group(2))
    return out


def _lookup(a, shift, i1, i2, cp):
    """CPython's two-level index: index2[(index1[cp >> shift] << shift) + (cp & mask)]"""
    return a[i2][(a[i1][cp >> shift] << shift) + (cp & ((1 << shift) - 1))]


class Ucd:
    """one version's data: category(cp), combining(cp), decomposition(cp), lower(cp)"""

    def __init__(self, version):
        digest = hashlib.sha256(open(path(version), "rb").read()).hexdigest()
        if digest != PINNED[version][2]:
            raise SystemExit("%s: SHA-256 %s, not the pinned %s" % (path(version), digest, PINNED[version][2]))
        with tarfile.open(path(version)) as t:
            names = t.getnames()

            def member(base):   # unicodedata2 9.0.0.post4 has py2/ and py3/ copies: the same data
                hits = sorted(n for n in names if n.endswith("/" + base) and "/py2/" not in n)
                return t.extractfile(hits[0]).read().decode("utf-8")
            db, ty = member("unicodedata_db.h"), member("unicodetype_db.h")
        m = re.search(r'#define UNIDATA_VERSION "([\d.]+)"', db)
        if not m or m.group(1) != version:
            raise SystemExit("%s: UNIDATA_VERSION %s, not %s" % (path(version), m and m.group(1), version))
        self.version = version
        self.db, self.ty = _arrays(db), _arrays(ty)
        self.ty_format = re.search(r"makeunicodedata\w*\.py (\d\.\d)", ty).group(1)

    def record(self, cp):
        return self.db["_PyUnicode_Database_Records"][_lookup(self.db, self.db["SHIFT"], "index1", "index2", cp)]

    def category(self, cp):
        return self.db["_PyUnicode_CategoryNames"][self.record(cp)[0]]

    def combining(self, cp):
        return self.record(cp)[1]

    def decomposition(self, cp):
        """(prefix, code points): prefix '' for a canonical decomposition, None when there is none"""
        d = self.db
        i = _lookup(d, d["DECOMP_SHIFT"], "decomp_index1", "decomp_index2", cp)
        count, prefix = d["decomp_data"][i] >> 8, d["decomp_data"][i] & 255
        if not count:
            return None
        return d["decomp_prefix"][prefix], d["decomp_data"][i + 1:i + 1 + count]

    def lower(self, cp):
        """the full lowercase mapping (UnicodeData.txt's simple one, or SpecialCasing.txt's
        unconditional one), as a list of code points"""
        if self.ty_format != "3.3":
            raise SystemExit("unicodetype_db.h of Unicode %s: format %s, read only 3.3" % (self.version, self.ty_format))
        upper, lower, title, _, _, flags = self.ty["_PyUnicode_TypeRecords"][_lookup(self.ty, self.ty["SHIFT"], "index1", "index2", cp)]
        if flags & EXTENDED_CASE:
            first, n = lower & 0xFFFF, lower >> 24
            return self.ty["_PyUnicode_ExtendedCase"][first:first + n]
        return [cp + lower]


def load(version):
    """the data of a pinned version (its archive must be in DIR: fetch() first)"""
    if missing([version]):
        raise SystemExit("no %s (Unicode %s): the generators' --write fetch it with pip" % (path(version), version))
    return Ucd(version)
