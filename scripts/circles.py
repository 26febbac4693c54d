"""Files in circles: per crate, the strongly connected components (two or
more files) of the graph "file A names an item of module B".

An edge A -> B comes from a path that starts with `crate::`, `super::` or
`self::`, in a `use` item or inline in code; the path points at the file of
the longest module prefix it names (so `crate::auth::Cause` is an edge to
auth/mod.rs, wherever Cause is really defined: a re-export counts where it
is named). A parent naming its own child without `self::` (`mod x; pub use
x::Y`) is the module tree itself, not an edge. Binaries under src/bin are
crates of their own. Used by code-stats.py.
"""
import re
import sys

USE = re.compile(r'(?<![\w:])use\s+([^;]*);', re.S)
INLINE = re.compile(r'(?<![\w:])((?:crate|super|self)(?:::(?:super|[A-Za-z_]\w*))+)')


def strip(text):
    """Drops comments and string literals, whose paths are not imports."""
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def expand(tree, prefix=()):
    """`a::{b, c::{d, e as f}}` -> (a, b), (a, c, d), (a, c, e)."""
    tree = re.sub(r'\s+', ' ', tree).strip()
    i = tree.find('{')
    if i < 0:
        name = re.split(r'\s+as\s+', tree)[0].replace(' ', '')
        yield prefix + tuple(s for s in name.split('::') if s)
        return
    head = tuple(s for s in tree[:i].replace(' ', '').split('::') if s)
    depth, part = 0, ''
    for ch in tree[i + 1:tree.rfind('}')] + ',':
        depth += (ch == '{') - (ch == '}')
        if ch == ',' and depth == 0:
            if part.strip():
                yield from expand(part, prefix + head)
            part = ''
        else:
            part += ch


def module_of(rel):
    """(crate root, module path) of a file path relative to src/."""
    parts = rel.with_suffix('').parts
    root = 'lib'
    if parts[0] == 'bin':
        root, parts = 'bin/' + parts[1], parts[2:]
    elif parts in (('lib',), ('main',)):
        parts = ()
    if parts and parts[-1] == 'mod' or root != 'lib' and parts[-1:] == ('main',):
        parts = parts[:-1]
    return root, tuple(parts)


INLINE_MOD = re.compile(r'\bmod\s+([A-Za-z_]\w*)\s*\{')


def scopes(text):
    """(start, end, name) of each inline `mod x { ... }`, whose `super::`
    is the file's own module."""
    out = []
    for m in INLINE_MOD.finditer(text):
        depth = 0
        for end in range(m.end() - 1, len(text)):
            depth += (text[end] == '{') - (text[end] == '}')
            if depth == 0:
                break
        out.append((m.start(), end, m.group(1)))
    return out


def named(text, mod):
    """(module the path is written in, path) for every crate-relative path."""
    inner = scopes(text)
    for pattern, paths in ((USE, expand), (INLINE, lambda p: [tuple(p.split('::'))])):
        for m in pattern.finditer(text):
            at = mod + tuple(n for s, e, n in inner if s < m.start() < e)
            for path in paths(m.group(1)):
                yield at, path


def resolve(path, here, mods):
    """The module (a key of mods) a crate-relative path names, or None."""
    if not path or path[0] not in ('crate', 'super', 'self'):
        return None
    base = () if path[0] == 'crate' else here
    rest = list(path[1:]) if path[0] == 'crate' else list(path)
    while rest and rest[0] in ('super', 'self'):
        base = base[:-1] if rest.pop(0) == 'super' else base
    full = base + tuple(rest)
    return next(full[:n] for n in range(len(full), -1, -1) if full[:n] in mods)


def components(nodes, edges):
    """Tarjan's strongly connected components with more than one node."""
    sys.setrecursionlimit(max(10000, 4 * len(nodes)))
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def crate_circles(root, src, tracked):
    """The circles of one crate, each a sorted list of repo-relative paths."""
    crates = {}
    for path in tracked(root, str(src.relative_to(root) / '*.rs')):
        name, mod = module_of(path.relative_to(src))
        crates.setdefault(name, {})[mod] = path
    found = []
    for mods in crates.values():
        edges = {}
        for mod, path in mods.items():
            text = strip(path.read_text(errors='replace'))
            for at, p in named(text, mod):
                to = resolve(p, at, mods)
                if to is not None and to != mod:
                    edges.setdefault(mod, set()).add(to)
        for comp in components(mods, edges):
            found.append([mods[m].relative_to(root) for m in comp])
    return found
