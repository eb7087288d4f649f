#!/usr/bin/env python3
"""Check a page in the Prometheus text format (0.0.4), as vsxd serves it.

  promcheck.py check FILE       exit 0 if FILE is valid, else print why
  promcheck.py get FILE SERIES  print the value of SERIES, e.g.
                                'vsxd_bytes_total{vm="web",direction="guest_to_host"}'
                                (labels in the order served); exit 1 if absent

Valid means: every line is a HELP, a TYPE or a sample; each family has one
HELP and one TYPE, before its samples, which are contiguous; names and
label names are valid, label values correctly escaped, values numbers;
counters end in _total; no series is repeated; and only the bounded labels
vsxd documents appear (nothing per connection).
"""
import re
import sys

NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*$')
LABEL = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*$')
TYPES = {'counter', 'gauge', 'histogram', 'summary', 'untyped'}
ALLOWED_LABELS = {'vm', 'state', 'reason', 'direction', 'limit', 'result', 'version', 'thread',
                  'mode'}


def parse_labels(s, where):
    """'a="x",b="y"' -> [(a, x), (b, y)], checking the escaping."""
    out, i = [], 0
    while i < len(s):
        m = re.match(r'([^=,]*)="', s[i:])
        if not m:
            raise ValueError(f'{where}: bad label list {s!r}')
        name = m.group(1)
        if not LABEL.match(name) or name.startswith('__'):
            raise ValueError(f'{where}: bad label name {name!r}')
        i += m.end()
        val = []
        while True:
            if i >= len(s):
                raise ValueError(f'{where}: unterminated label value')
            c = s[i]
            if c == '\\':
                if i + 1 >= len(s) or s[i + 1] not in '\\"n':
                    raise ValueError(f'{where}: bad escape in a label value')
                val.append({'\\': '\\', '"': '"', 'n': '\n'}[s[i + 1]])
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == '\n':
                raise ValueError(f'{where}: newline in a label value')
            else:
                val.append(c)
                i += 1
        out.append((name, ''.join(val)))
        if i < len(s):
            if s[i] != ',':
                raise ValueError(f'{where}: expected "," after a label')
            i += 1
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f'{where}: a label given twice')
    return out


def parse(text):
    """Validate; return {series text: value}."""
    helps, types, done, series = {}, {}, set(), {}
    current = None
    if text and not text.endswith('\n'):
        raise ValueError('the page does not end with a newline')
    for n, line in enumerate(text.split('\n')[:-1], 1):
        where = f'line {n}'
        if line.startswith('#'):
            m = re.match(r'# (HELP|TYPE) (\S+)(?: (.*))?$', line)
            if not m:
                if line.startswith('# HELP') or line.startswith('# TYPE'):
                    raise ValueError(f'{where}: malformed {line!r}')
                continue
            kind, name, rest = m.group(1), m.group(2), m.group(3) or ''
            if not NAME.match(name):
                raise ValueError(f'{where}: bad metric name {name!r}')
            if name in done:
                raise ValueError(f'{where}: {name} comes back after other families')
            table = helps if kind == 'HELP' else types
            if name in table:
                raise ValueError(f'{where}: second {kind} for {name}')
            if kind == 'TYPE':
                if rest not in TYPES:
                    raise ValueError(f'{where}: bad type {rest!r}')
                if rest == 'counter' and not name.endswith('_total'):
                    raise ValueError(f'{where}: counter {name} does not end in _total')
            elif not rest:
                raise ValueError(f'{where}: empty HELP for {name}')
            table[name] = rest
            if current and current != name:
                done.add(current)
            current = name
            continue
        m = re.match(r'([^{\s]+)(?:\{(.*)\})? (\S+)$', line)
        if not m:
            raise ValueError(f'{where}: not a sample: {line!r}')
        name, labels, value = m.group(1), m.group(2), m.group(3)
        if not NAME.match(name):
            raise ValueError(f'{where}: bad metric name {name!r}')
        if name not in helps or name not in types:
            raise ValueError(f'{where}: {name} has no HELP and TYPE before it')
        if name != current:
            raise ValueError(f'{where}: {name} is not contiguous with its family')
        for lname, _ in parse_labels(labels or '', where):
            if lname not in ALLOWED_LABELS:
                raise ValueError(f'{where}: label {lname!r} is not a bounded one')
        try:
            float(value)
        except ValueError:
            raise ValueError(f'{where}: bad value {value!r}') from None
        key = name + ('{' + labels + '}' if labels else '')
        if key in series:
            raise ValueError(f'{where}: {key} repeated')
        series[key] = value
    for name in helps:
        if name not in types:
            raise ValueError(f'{name} has HELP but no TYPE')
    return series


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ('check', 'get'):
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[2], encoding='utf-8') as f:
        text = f.read()
    try:
        series = parse(text)
    except ValueError as e:
        print(f'promcheck: {sys.argv[2]}: {e}', file=sys.stderr)
        return 1
    if sys.argv[1] == 'check':
        return 0
    if sys.argv[3] not in series:
        print(f'promcheck: no series {sys.argv[3]}', file=sys.stderr)
        return 1
    print(series[sys.argv[3]])
    return 0


if __name__ == '__main__':
    sys.exit(main())
