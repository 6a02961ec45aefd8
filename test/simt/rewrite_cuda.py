#!/usr/bin/env python3
"""Rewrites one CUDA source file so that a host C++ compiler can build it with the SIMT layer.

Usage: rewrite_cuda.py INPUT OUTPUT

Three constructs have no C++ spelling; they are rewritten and everything else is copied as is:

  kernel<<<grid, block, shared, stream>>>(args)
      -> ::simt::launch(kernel, "kernel", grid, block, shared, stream)(args)
  extern __shared__ T name[];                 (inside a function)
      -> T* name = ::simt::dynamic_shared_memory<T>();
  __shared__ T name[N];                       (inside a function, one declarator)
      -> auto& name = ::simt::static_shared<T[N]>([] {});

Other __shared__ declarations are left to simt.h, which defines __shared__ as `static`.
Line numbers are preserved and a #line directive names the original file, so compiler errors
and sanitizer reports point at the original source.
"""
import re
import sys

COMMENT_OR_LITERAL = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
DIRECTIVE = re.compile(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', re.M)
ALIGNMENT = re.compile(r'\b(?:__align__|alignas)\s*\([^()]*\)')
SHARED_DECLARATION = re.compile(
    r'^(?P<extern>extern\s+)?(?:static\s+)?(?P<volatile>volatile\s+)?__shared__\s+(?P<type>.+?)\s*\b'
    r'(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$', re.S)


class RewriteError(Exception):
    pass


def blank(text):
    """Spaces instead of every character except newlines, so positions and lines stay put."""
    return re.sub(r'[^\n]', ' ', text)


def code_only(text):
    """The text with comments and the contents of string and character literals blanked, so
    that searches see only code (quotes stay, so `extern "C"` is still recognisable)."""
    def replace(match):
        token = match.group(0)
        if token[0] in '"\'':
            return token[0] + blank(token[1:-1]) + token[-1]
        return blank(token)
    return COMMENT_OR_LITERAL.sub(replace, text)


def line_of(text, position):
    return text.count('\n', 0, position) + 1


def with_same_line_count(original, replacement):
    """Appends the newlines that `replacement` lacks, so that later lines keep their numbers."""
    return replacement + '\n' * max(0, original.count('\n') - replacement.count('\n'))


# ---- launches ---------------------------------------------------------------------------------

def kernel_start(code, end):
    """Start of the kernel expression ending just before `end`: a name, possibly qualified
    (ns::kernel) and with template arguments (kernel<float, 4>)."""
    i = end
    while i > 0 and code[i - 1].isspace():
        i -= 1
    if i > 0 and code[i - 1] == '>':
        depth = 0
        while i > 0:
            i -= 1
            depth += {'>': 1, '<': -1}.get(code[i], 0)
            if depth == 0:
                break
    while i > 0 and (code[i - 1].isalnum() or code[i - 1] in '_:'):
        i -= 1
    return i


def closing(code, start, token):
    """Position of `token` after `start`, outside any brackets; None if there is none."""
    depth = 0
    for i in range(start, len(code)):
        if depth == 0 and code.startswith(token, i):
            return i
        if code[i] in '([{':
            depth += 1
        elif code[i] in ')]}':
            depth -= 1
    return None


def launch_edits(text, code):
    """(start, end, replacement) for every `kernel<<<...>>>(...)` in the file."""
    edits = []
    for match in re.finditer(r'<<<', code):
        start = kernel_start(code, match.start())
        kernel = text[start:match.start()].strip()
        config_end = closing(code, match.end(), '>>>')
        if not kernel or config_end is None:
            raise RewriteError(line_of(text, match.start()), 'cannot parse this kernel launch')
        args_open = config_end + 3
        while args_open < len(code) and code[args_open].isspace():
            args_open += 1
        args_close = closing(code, args_open + 1, ')') if code[args_open:args_open + 1] == '(' else None
        if args_close is None:
            raise RewriteError(line_of(text, match.start()), 'expected (arguments) after >>>')
        name = ' '.join(kernel.split())
        replacement = '::simt::launch({}, "{}", {})({})'.format(
            kernel, name, text[match.end():config_end], text[args_open + 1:args_close])
        edits.append((start, args_close + 1, with_same_line_count(text[start:args_close + 1], replacement)))
    return edits


# ---- shared memory ----------------------------------------------------------------------------

def inside_function(code, position):
    """Whether `position` lies in a function body, judged from the braces before it: a brace
    opens a namespace (after `namespace` or `extern "C"`), a class (after class, struct, union
    or enum with no parenthesis after it), or else code."""
    scopes = []
    statement_start = 0
    for i in range(position):
        char = code[i]
        if char == '{':
            header = code[statement_start:i]
            if re.search(r'\bnamespace\b|\bextern\s*"', header):
                scopes.append('namespace')
            elif re.search(r'\b(?:class|struct|union|enum)\b[^()]*$', header):
                scopes.append('class')
            else:
                scopes.append('code')
        elif char == '}' and scopes:
            scopes.pop()
        if char in '{};':
            statement_start = i + 1
    return 'code' in scopes


def shared_edits(text, code):
    """(start, end, replacement) for the __shared__ declarations that need rewriting."""
    edits = []
    for match in re.finditer(r'\b__shared__\b', code):
        start = max(code.rfind(c, 0, match.start()) for c in ';{}') + 1
        while code[start].isspace():
            start += 1
        end = code.find(';', match.end())
        declaration = SHARED_DECLARATION.match(ALIGNMENT.sub(' ', code[start:end]).strip())
        in_function = inside_function(code, start)
        if declaration is None or re.search(r'[,=]', code[start:end]):
            if 'extern' in code[start:match.start()]:
                raise RewriteError(line_of(text, start), 'unsupported extern __shared__ declaration')
            continue  # left to `#define __shared__ static`
        kind = (declaration.group('volatile') or '') + declaration.group('type')
        name = declaration.group('name')
        dims = ''.join(declaration.group('dims').split())
        if declaration.group('extern'):
            if not in_function or dims != '[]':
                raise RewriteError(line_of(text, start),
                                   'extern __shared__ must be declared as `T name[]` inside a function')
            replacement = '{0}* {1} = ::simt::dynamic_shared_memory<{0}>()'.format(kind, name)
        elif in_function:
            replacement = 'auto& {} = ::simt::static_shared<{}{}>([] {{}})'.format(name, kind, dims)
        else:
            continue  # namespace scope: left to `#define __shared__ static`
        edits.append((start, end, with_same_line_count(text[start:end], replacement)))
    return edits


def rewrite(text, path):
    code = code_only(text)
    edits = launch_edits(text, code)
    edits += shared_edits(text, DIRECTIVE.sub(lambda m: blank(m.group(0)), code))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return '#line 1 "{}"\n{}'.format(path, text)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, target = sys.argv[1], sys.argv[2]
    with open(source) as f:
        text = f.read()
    try:
        rewritten = rewrite(text, source)
    except RewriteError as error:
        sys.exit('{}:{}: error: {} (SIMT rewrite)'.format(source, *error.args))
    with open(target, 'w') as f:
        f.write(rewritten)


if __name__ == '__main__':
    main()
