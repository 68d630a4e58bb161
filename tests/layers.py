#!/usr/bin/env python3
"""Checks docs/ARCHITECTURE.md's layer table against the tree and the includes.

Usage: layers.py SOURCE_DIR

The table ("| Layer | Folder | Public headers | What it holds |") lists every folder of
src/ and every header of include/flare/ once, lowest layer first. Checked:

- every listed folder and header exists; every folder of src/ holding sources is
  listed or lies inside a listed one; every header of include/flare/ is listed;
- a file of src/ (or a public header) includes only its own folder's headers, public
  headers of lower layers, and private headers of another folder only where the
  exception table ("| Private header | Included from | Why |") names them, and only
  from a lower layer;
- models/, apps/, examples/ and bench/ include no file of src/ (but where the
  exception table names the program) and call no fl__ function: they are built on the
  public headers alone.

Standard library only. Exits 1 and prints each violation.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CODE = re.compile(r'`([^`]+)`')


def table_rows(text, first_header):
    """The cells of the rows of the markdown table whose header starts with first_header."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if line.lstrip().startswith('|') and cells[0] == first_header:
            rows = []
            for row in lines[i + 2:]:
                if not row.lstrip().startswith('|'):
                    break
                rows.append([c.strip() for c in row.strip().strip('|').split('|')])
            return rows
    sys.exit(f'layers.py: no table starting with "| {first_header} |" in docs/ARCHITECTURE.md')


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    text = open(os.path.join(root, 'docs', 'ARCHITECTURE.md'), encoding='utf-8').read()
    errors = []

    # ---- the layer table ----
    folders = {}  # 'src/nn' -> layer
    headers = {}  # 'include/flare/nn.h' -> (layer, folder or None)
    for cells in table_rows(text, 'Layer'):
        layer = int(cells[0])
        names = CODE.findall(cells[1])
        folder = names[0].rstrip('/') if names else None
        if folder:
            if folder in folders:
                errors.append(f'{folder} is listed twice')
            folders[folder] = layer
        for h in CODE.findall(cells[2]):
            path = 'include/flare/' + h
            if path in headers:
                errors.append(f'{path} is listed twice')
            headers[path] = (layer, folder)

    # ---- the table against the tree ----
    for folder in folders:
        if not os.path.isdir(os.path.join(root, folder)):
            errors.append(f'{folder} is listed in docs/ARCHITECTURE.md but does not exist')
    for path in headers:
        if not os.path.isfile(os.path.join(root, path)):
            errors.append(f'{path} is listed in docs/ARCHITECTURE.md but does not exist')

    def folder_of(path):
        """The listed folder a file of src/ belongs to: the longest listed prefix."""
        best = None
        for f in folders:
            if path.startswith(f + '/') and (best is None or len(f) > len(best)):
                best = f
        return best

    sources = []
    for dirpath, _, files in os.walk(os.path.join(root, 'src')):
        rel = os.path.relpath(dirpath, root)
        mine = sorted(f for f in files if f.endswith(('.c', '.h')))
        if mine and folder_of(rel + '/x') is None:
            errors.append(f'{rel}/ holds sources but is not in the table of docs/ARCHITECTURE.md')
        sources += [os.path.join(rel, f) for f in mine]
    for name in sorted(os.listdir(os.path.join(root, 'include', 'flare'))):
        if name.endswith('.h') and 'include/flare/' + name not in headers:
            errors.append(f'include/flare/{name} is not in the table of docs/ARCHITECTURE.md')

    # ---- the exceptions ----
    allowed = []  # (private header, file or folder prefix of the includer)
    for cells in table_rows(text, 'Private header'):
        for h in CODE.findall(cells[0]):
            for who in CODE.findall(cells[1]):
                allowed.append((h, who.rstrip('/')))
    used = set()

    def resolve(includer, name, bases=('include',)):
        for base in (os.path.dirname(includer),) + bases:
            path = os.path.normpath(os.path.join(base, name))
            if os.path.isfile(os.path.join(root, path)):
                return path
        return None

    def includes(path):
        return INCLUDE.findall(open(os.path.join(root, path), encoding='utf-8').read())

    # ---- includes of src/ and of the public headers ----
    for path in sources + sorted(headers):
        if path.startswith('src/'):
            own = folder_of(path)
            if own is None:
                continue
            layer = folders[own]
        else:
            layer, own = headers[path]
        for name in includes(path):
            target = resolve(path, name)
            if target is None:
                errors.append(f'{path}: "{name}" is not a file of the tree')
            elif target.startswith('include/flare/'):
                if target not in headers:
                    continue  # reported above
                t_layer, t_folder = headers[target]
                if not (t_layer < layer or t_folder == own or (t_layer == layer and t_folder is None)):
                    errors.append(f'{path} (layer {layer}) includes {target} (layer {t_layer})')
            elif target.startswith('src/'):
                t_folder = folder_of(target)
                if t_folder == own:
                    continue
                ok = [(h, who) for h, who in allowed
                      if h == target and (path == who or path.startswith(who + '/'))]
                if not ok:
                    errors.append(f'{path} includes {target}, private to {t_folder}/, and no exception '
                                  'in docs/ARCHITECTURE.md names it')
                elif folders.get(t_folder, 1 << 30) >= layer:
                    errors.append(f'{path} (layer {layer}) includes {target} of a layer not below it')
                used.update(ok)
            else:
                errors.append(f'{path} includes {target}, outside src/ and include/')
    # ---- programs built on the library ----
    for top in ('models', 'apps', 'examples', 'bench'):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(('.c', '.h')):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), root)
                body = open(os.path.join(root, path), encoding='utf-8').read()
                for name in INCLUDE.findall(body):
                    # src/ too: a program linking the internal library has it on its path
                    target = resolve(path, name, ('include', 'src'))
                    if target and target.startswith('src/'):
                        ok = [(h, who) for h, who in allowed if h == target and path == who]
                        if not ok:
                            errors.append(f'{path} includes {target}: programs use public headers only, '
                                          'but where an exception in docs/ARCHITECTURE.md names them')
                        used.update(ok)
                for m in sorted(set(re.findall(r'\bfl__\w+', body))):
                    errors.append(f'{path} uses {m}: programs use public names only')

    for h, who in allowed:
        if (h, who) not in used:
            errors.append(f'the exception for {h} from {who} in docs/ARCHITECTURE.md is not used')

    for e in errors:
        print(e)
    print(f'layers.py: {len(folders)} folders, {len(headers)} headers, {len(sources)} sources, '
          f'{len(errors)} violations')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
