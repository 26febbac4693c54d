#!/usr/bin/env python3
"""Counts the code-shape figures the hardening issue tracks, from the tracked
sources (git ls-files, so target/ and caches never count):

  unsafe blocks           `unsafe {` in Rust (not `unsafe fn` / `unsafe impl`)
  Rust fns over N lines   fn item from its signature line to its closing brace
  files over M lines      Rust and Go sources
  Go funcs over N lines   func from its signature line to its closing brace
  file circles            per crate, groups of two or more Rust files that
                          import each other in a loop (see circles.py)

Function bounds are found from rustfmt/gofmt layout: a function ends at the
first later line that is its own indentation followed by `}`. Usage:

  scripts/code-stats.py [--list] [--fn-max 150] [--file-max 800]
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

from circles import crate_circles

RUST_FN = re.compile(
    r'^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?'
    r'(?:extern\s+"[^"]*"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')
GO_FUNC = re.compile(r'^func\s+(?:\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)')
UNSAFE_BLOCK = re.compile(r'\bunsafe\s*\{')


def tracked(root, *globs):
    out = subprocess.run(['git', '-C', str(root), 'ls-files', '--', *globs],
                         check=True, capture_output=True, text=True).stdout
    return [root / p for p in out.split('\n') if p]


def functions(lines, pattern, indent_of):
    """Yields (name, first line number, length) for every function."""
    for i, line in enumerate(lines):
        m = pattern.match(line)
        if not m:
            continue
        indent = indent_of(m)
        # A declaration without a body (trait method, extern item) ends in `;`
        # before any `{`.
        j = i
        while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
            j += 1
        if j >= len(lines) or '{' not in lines[j]:
            continue
        if lines[j].rstrip().endswith('}') and lines[j].count('{') == lines[j].count('}'):
            yield m.group(m.lastindex), i + 1, j - i + 1
            continue
        close = indent + '}'
        for k in range(j + 1, len(lines)):
            if lines[k].rstrip() == close:
                yield m.group(m.lastindex), i + 1, k - i + 1
                break


def strip_comment(line):
    i = line.find('//')
    return line if i < 0 else line[:i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--list', action='store_true', help='name each item counted')
    ap.add_argument('--fn-max', type=int, default=150)
    ap.add_argument('--file-max', type=int, default=800)
    args = ap.parse_args()
    root = Path(subprocess.run(['git', 'rev-parse', '--show-toplevel'], check=True,
                               capture_output=True, text=True).stdout.strip())

    unsafe_blocks, long_rust, long_go, long_files = [], [], [], []
    for path in tracked(root, '*.rs'):
        lines = path.read_text(errors='replace').split('\n')
        rel = path.relative_to(root)
        for n, line in enumerate(lines, 1):
            unsafe_blocks += [(rel, n)] * len(UNSAFE_BLOCK.findall(strip_comment(line)))
        for name, n, length in functions(lines, RUST_FN, lambda m: m.group(1)):
            if length > args.fn_max:
                long_rust.append((rel, n, name, length))
        if len(lines) - 1 > args.file_max:
            long_files.append((rel, len(lines) - 1))
    for path in tracked(root, '*.go'):
        lines = path.read_text(errors='replace').split('\n')
        rel = path.relative_to(root)
        for name, n, length in functions(lines, GO_FUNC, lambda m: ''):
            if length > args.fn_max:
                long_go.append((rel, n, name, length))
        if len(lines) - 1 > args.file_max:
            long_files.append((rel, len(lines) - 1))

    print(f'unsafe blocks (Rust):               {len(unsafe_blocks)}')
    print(f'Rust functions over {args.fn_max} lines:      {len(long_rust)}')
    if args.list:
        for rel, n, name, length in sorted(long_rust, key=lambda t: -t[3]):
            print(f'    {length:5}  {name}  {rel}:{n}')
    print(f'Go functions over {args.fn_max} lines:        {len(long_go)}')
    if args.list:
        for rel, n, name, length in sorted(long_go, key=lambda t: -t[3]):
            print(f'    {length:5}  {name}  {rel}:{n}')
    print(f'files over {args.file_max} lines (Rust, Go):    {len(long_files)}')
    if args.list:
        for rel, length in sorted(long_files, key=lambda t: -t[1]):
            print(f'    {length:5}  {rel}')
    circles = []
    for cargo in tracked(root, '*Cargo.toml'):
        if (cargo.parent / 'src').is_dir():
            circles += crate_circles(root, cargo.parent / 'src', tracked)
    print(f'file circles (Rust, per crate):      {len(circles)}')
    for files in circles:
        print(f'    {len(files):3}  ' + ' '.join(str(f) for f in files))
    if args.list:
        per_file = {}
        for rel, _ in unsafe_blocks:
            per_file[rel] = per_file.get(rel, 0) + 1
        print('unsafe blocks per file:')
        for rel, count in sorted(per_file.items(), key=lambda t: -t[1]):
            print(f'    {count:5}  {rel}')


if __name__ == '__main__':
    sys.exit(main())
