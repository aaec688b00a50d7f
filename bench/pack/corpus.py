"""The benchmark corpora, built from files every Debian/Python machine has (no downloads).
Prose: natural English — the Python standard library's docstrings (parsed with `ast`, nothing
imported), /usr/share/common-licenses, and the Debian copyright/changelog files under
/usr/share/doc. Code: every standard-library .py source file whole (indentation, long
identifiers, docstrings, comments) interleaved with those docs — technical documentation with
code. Shared by bench/pack/bench.py, bench/pack/scale.py and bench/tokenizers/bench.py."""
import ast, glob, gzip, os, sysconfig

import pyarrow as pa
import pyarrow.parquet as pq


def natural_docs():
    docs = []
    stdlib = sysconfig.get_paths()["stdlib"]
    for path in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
        if "site-packages" in path or "/test" in path:
            continue
        try:
            tree = ast.parse(open(path, encoding="utf-8").read())
        except Exception:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node)
                if d and len(d) > 200:
                    docs.append(d)
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            docs.append(open(path, encoding="utf-8", errors="replace").read())
    for path in sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/share/doc/*/changelog*.gz")):
        try:
            t = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
            docs.append(t.decode("utf-8", "replace")[:200_000])
        except Exception:
            pass
    return docs


def code_docs():
    """Every standard-library .py source file of at least 200 bytes, whole, in path order."""
    stdlib = sysconfig.get_paths()["stdlib"]
    docs = []
    for path in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
        if "site-packages" in path:
            continue
        try:
            t = open(path, encoding="utf-8").read()
        except Exception:
            continue
        if len(t) > 200:
            docs.append(t)
    return docs


def code_and_docs():
    """Source files and the natural documents interleaved: code-heavy technical text."""
    code, prose = code_docs(), natural_docs()
    out = []
    for i in range(max(len(code), len(prose))):
        if i < len(code):
            out.append(code[i])
        if i < len(prose):
            out.append(prose[i])
    return out


def corpus(WORK, n_mb, name, base=None):
    """At least n_mb MB of text: the natural documents in order, cycled (or `base` cycled)."""
    path = os.path.join(WORK, name)
    if os.path.exists(path):
        return path
    base = base or natural_docs()
    out, size, k = [], 0, 0
    while size < n_mb * 1_000_000:
        d = base[k % len(base)]
        out.append(d)
        size += len(d.encode())
        k += 1
    pq.write_table(pa.table({"id": list(range(len(out))), "text": out}), path, compression="zstd", row_group_size=4096)
    return path


