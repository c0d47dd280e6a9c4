#!/usr/bin/env python3
"""ptx_compare.py — is a restructured tree's device code the same as before, names aside?

  dev/ptx_compare.py dump ROOT OUT_DIR [DIR...] nvcc -ptx every .cu under ROOT/src, dev, tools and
                                               tests/support (or the DIRs named; the library's flags,
                                               no -lineinfo) into OUT_DIR
  dev/ptx_compare.py diff BEFORE_DIR AFTER_DIR every kernel (.entry) of BEFORE matched to one of AFTER
                                               by its normalised text; prints the unmatched

Normalised: comments, .loc / .file and the module header dropped; inline-asm labels (WAIT_%=) numbered
per kernel; every mangled name (the kernel's
own, its parameters', its static shared arrays', any .func it calls) replaced by its order of first
appearance; basic-block labels and local depots numbered per kernel; the bodies of the .func it
calls and the declarations of the module-scope variables it names appended. Two kernels match when
the rest is the same text line by line, up to a consistent renaming of virtual registers (each
value — a register from one write to the next — maps to one value of the other side, both ways):
the same instructions in the same order on the same data flow, constants and layout; only names,
register numbers and the file they live in may differ.
"""
import difflib, hashlib, os, re, subprocess, sys

NVCC_FLAGS = ["-ptx", "-gencode", "arch=compute_90a,code=compute_90a", "-O3", "-DNDEBUG", "-std=c++17"]

def dump(root, out, tops=("src", "dev", "tools", "tests/support")):
    os.makedirs(out, exist_ok=True)
    incs = ["-I" + os.path.join(root, d) for d in ("include", "src", "tests/support", "dev")]
    incs += ["-I" + d for d, _, _ in os.walk(os.path.join(root, "src"))]
    srcs = []
    for top in tops:
        for d, _, fs in os.walk(os.path.join(root, top)):
            srcs += [os.path.join(d, f) for f in fs if f.endswith(".cu")]
    for s in sorted(srcs):
        rel = os.path.relpath(s, root)
        dst = os.path.join(out, rel.replace("/", "_") + ".ptx")
        extra = ["-I" + os.path.dirname(s)]
        r = subprocess.run(["nvcc"] + NVCC_FLAGS + incs + extra + [s, "-o", dst], capture_output=True, text=True)
        print(("ok   " if r.returncode == 0 else "FAIL ") + rel, flush=True)
        if r.returncode:
            sys.stderr.write(r.stderr[-2000:])

MANGLED = re.compile(r"_Z[A-Za-z0-9_$]+")
HEADER = re.compile(r"^\s*(\.version|\.target|\.address_size|\.file|\.loc|//)")

def items(text):
    """Top-level items: (kind, name, text) for .entry / .func definitions and module-scope variables."""
    lines = [l for l in text.splitlines() if not HEADER.match(l) and l.strip()]
    out, i = [], 0
    while i < len(lines):
        l = lines[i]
        m = re.match(r"^\s*(\.visible\s+|\.weak\s+|\.extern\s+)*\.(entry|func)\b", l)
        if m:
            kind = m.group(2)
            buf = [l]
            depth = l.count("{") - l.count("}")
            seen_brace = "{" in l
            i += 1
            while i < len(lines):
                buf.append(lines[i])
                depth += lines[i].count("{") - lines[i].count("}")
                seen_brace = seen_brace or "{" in lines[i]
                i += 1
                if seen_brace and depth == 0:
                    break
                if not seen_brace and buf[-1].rstrip().endswith(";"):  # a declaration only
                    break
            out.append((kind, func_name("\n".join(buf)), "\n".join(buf), seen_brace))
            continue
        m = re.match(r"^\s*(\.visible\s+|\.extern\s+|\.weak\s+)*\.(global|shared|const)\b.*?([A-Za-z_$][A-Za-z0-9_$]*)\s*(\[[^\]]*\])*\s*(=.*)?;\s*$", l)
        if m:
            out.append(("var", m.group(3), l.strip(), True))
        i += 1
    return out

def func_name(text):
    # `.func (.param .b32 func_retval0) NAME(` or `.func NAME(`
    first = text.split("\n", 1)[0] + " " + (text.split("\n", 2)[1] if "\n" in text else "")
    s = re.sub(r"\(\s*\.param[^)]*\)", " ", first, count=1) if re.search(r"\.func\s*\(", first) else first
    m = re.search(r"\.(?:entry|func)\s+([A-Za-z_$][A-Za-z0-9_$]*)", s)
    return m.group(1) if m else "?"

def signature(entry_text, funcs, vars_, seen=None):
    seen = set() if seen is None else seen
    ids = {}
    def canon(m):
        n = m.group(0)
        base = re.sub(r"_param_\d+$", "", n)
        suffix = n[len(base):]
        if base not in ids:
            ids[base] = "$N%d" % len(ids)
        return ids[base] + suffix
    body = re.sub(r"\$L__BB\d+_", "$L__BB_", entry_text)
    body = re.sub(r"__local_depot\d+", "__local_depot", body)
    body = re.sub(r"//.*", "", body)  # comments: `{ // callseq N` numbers the module's calls
    asm_labels = {}  # inline-asm labels (`WAIT_%=`: numbered through the module): in order of appearance
    body = re.sub(r"\b([A-Z]+)_\d+\b", lambda m: asm_labels.setdefault(m.group(0), "%s_%d" % (m.group(1), len(asm_labels))), body)
    body = MANGLED.sub(canon, body)
    body = re.sub(r"(\.reg\s+\.\w+\s+%\w+)<\d+>", r"\1<N>", body)
    extra = []
    for n in ids:
        if n in vars_:
            extra.append(MANGLED.sub(lambda m: ids.get(m.group(0), m.group(0)), vars_[n]))
        if n in funcs and n not in seen:
            seen.add(n)
            extra.append(signature(funcs[n], funcs, vars_, seen))
    # plain (unmangled) module variables and functions named in the body
    for n, decl in vars_.items():
        if not n.startswith("_Z") and re.search(r"\b%s\b" % re.escape(n), entry_text):
            extra.append(decl)
    for n, t in funcs.items():
        if not n.startswith("_Z") and n not in seen and re.search(r"\b%s\b" % re.escape(n), entry_text):
            seen.add(n)
            extra.append(signature(t, funcs, vars_, seen))
    return body + "\n" + "\n".join(extra)

def entries(d):
    res = []
    for f in sorted(os.listdir(d)):
        if not f.endswith(".ptx"):
            continue
        text = open(os.path.join(d, f)).read()
        its = items(text)
        funcs = {func_name(t): t for k, n, t, has_body in its if k == "func" and has_body}
        vars_ = {n: t for k, n, t, _ in its if k == "var"}
        for k, n, t, has_body in its:
            if k == "entry":
                name = func_name(t)
                sig = signature(t, funcs, vars_)
                coarse = REG.sub(lambda m: "%" + m.group(1), sig)
                res.append((hashlib.sha256(coarse.encode()).hexdigest()[:16], name, f, len(t.splitlines()), sig))
    return res

REG = re.compile(r"%(r|rd|rs|f|fd|p|h|hh|b|c|e)(\d+)\b")

NO_DEST = ("st.", "stmatrix", "red.", "cp.", "bar.", "barrier.", "bra", "ret", "exit", "fence", "membar",
           "griddepcontrol", "setmaxnreg", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group",
           "mbarrier.init", "mbarrier.inval", "prefetch", "trap")

def operands(line):
    """(guard registers, destination registers, source registers, accumulates) of one PTX line."""
    t = line.strip()
    guard = []
    m = re.match(r"@!?(%\w+)\s+(.*)", t)
    if m:
        guard, t = REG.findall(m.group(1)), m.group(2)
    parts = t.split(None, 1)
    if len(parts) < 2 or t.endswith(":") or t.startswith("."):
        return guard, [], REG.findall(t), False
    op, rest = parts[0], parts[1].rstrip(";")
    ops, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            ops.append(cur)
            cur = ""
        else:
            cur += ch
    ops.append(cur)
    if op.startswith(NO_DEST) or not ops:
        return guard, [], REG.findall(rest), False
    return guard, REG.findall(ops[0]), [r for o in ops[1:] for r in REG.findall(o)], op.startswith("wgmma.mma_async")

def isomorphic(a, b):
    """Same text line by line, but for a consistent renaming of virtual registers: every value (a
    register between two writes of it) of one side maps to one value of the other, both ways."""
    la, lb = a.split("\n"), b.split("\n")
    if len(la) != len(lb):
        return False
    fwd, back = {}, {}
    va, vb = {}, {}
    def same(ka, kb):
        return fwd.setdefault(ka, kb) == kb and back.setdefault(kb, ka) == ka
    for x, y in zip(la, lb):
        if REG.sub("%", x) != REG.sub("%", y):
            return False
        ga, da, sa, acc = operands(x)
        gb, db, sb, _ = operands(y)
        reads_a = ga + sa + (da if acc else [])
        reads_b = gb + sb + (db if acc else [])
        for ra, rb in zip(reads_a, reads_b):
            if ra[0] != rb[0] or not same((ra, va.get(ra, 0)), (rb, vb.get(rb, 0))):
                return False
        for ra, rb in zip(da, db):
            va[ra] = va.get(ra, 0) + 1
            vb[rb] = vb.get(rb, 0) + 1
            if not same((ra, va[ra]), (rb, vb[rb])):
                return False
    return True

def demangle(names):
    try:
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        return r.stdout.splitlines()
    except OSError:
        return names

def diff(a, b):
    ea, eb = entries(a), entries(b)
    free = list(eb)
    only_a = []
    for e in ea:
        m = next((x for x in free if x[0] == e[0] and isomorphic(e[4], x[4])), None)
        if m is None:
            only_a.append(e)
        else:
            free.remove(m)
    only_b = free
    print("%d kernels before, %d after; %d before match one after" % (len(ea), len(eb), len(ea) - len(only_a)))
    if only_a and only_b:  # the closest unmatched kernel after each unmatched one before, and how far
        print("closest (lines of the normalised text that differ, registers aside):")
        coarse = lambda e: REG.sub(lambda m: "%" + m.group(1), e[4]).split("\n")
        for e, dn in zip(only_a, demangle([e[1] for e in only_a])):
            best = None
            for x in only_b:
                if abs(len(x[4]) - len(e[4])) > 0.3 * len(e[4]):
                    continue
                sm = difflib.SequenceMatcher(None, coarse(e), coarse(x), autojunk=False)
                d = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal")
                if best is None or d < best[0]:
                    best = (d, x)
            if best:
                print("  %-60s ~ %-60s %d" % (dn[:60], demangle([best[1][1]])[0][:60], best[0]))
    for title, lst in (("only before", only_a), ("only after", only_b)):
        if lst:
            print(title + ":")
            for e, dn in zip(lst, demangle([e[1] for e in lst])):
                print("  %s  %-40s %5d lines  %s" % (e[0], e[2], e[3], dn[:150]))
    return 1 if only_a or only_b else 0

if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "dump":
        dump(sys.argv[2], sys.argv[3], *([tuple(sys.argv[4:])] if len(sys.argv) > 4 else []))
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        sys.exit(diff(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
