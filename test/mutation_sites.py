"""The places test/mutate.py --generated plants its bugs, found in the sources rather than chosen
by hand (docs/mutation.md):

    throw      a `throw InputError(...)` or `throw OutputError(...)` statement (C++) or a
               `raise InputError(...)`, `UserError`, `WriteError`, `PlotError`, `ResultsError`
               statement (Python) removed: the refusal no longer happens and the code goes on;
    exitN      an exit status 2, 3 or 4 (`return 2;`, `? 0 : 3;`, `return 4`, `sys.exit(2)`, the
               argparse `self.exit(2, ...)`) turned into 1;
    OP→OP'     a comparison at its edge: < and <= swapped, > and >= swapped;
    N→N±1      an integer literal of such a comparison, or of the data loader's window
               arithmetic, one more or one less.

A mutant's name is FILE:LINE:KIND (eval.cpp:481:throw, training.h:80:>=→>, dataloader.h:210:1→2),
with #2, #3 ... after a name that repeats on its line.

Comparisons are taken from the conditions that guard a refusal (the `if` whose body is the throw
or raise), and every one of training.h (the run-outcome rules) and dataloader.h (the loader's
windows), where the window arithmetic's literals are shifted too.

Each Site is a span of one file and its variants (the replacement texts); a Mutant is one
variant. For Python the mutant is applied as text (mutate.py swaps the file); for C++ every
mutant of a file is compiled into it at once (instrument_cpp): each site becomes
`mutant_on(K) ? VARIANT : ORIGINAL`, and the environment variable GPT2_MUTANT=K picks one, so the
programs and tests are built once for the whole audit."""
import dataclasses
import io
import re
import tokenize

# The refusals: exceptions whose throw (C++) or raise (Python) is a site.
CPP_REFUSALS = ("InputError", "OutputError")
PY_REFUSALS = ("InputError", "UserError", "WriteError", "PlotError", "ResultsError")
# Files whose every comparison is a site (not only those that guard a refusal), and whose
# arithmetic literals are shifted too (dataloader.h's window arithmetic).
EVERY_COMPARISON = ("training.h", "dataloader.h")
ARITHMETIC_LITERALS = ("dataloader.h",)
EDGE = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}


@dataclasses.dataclass
class Mutant:
    name: str          # FILE:LINE:KIND, e.g. eval.cpp:481:throw, training.h:80:>=
    path: str
    start: int         # the span of the original text it replaces
    end: int
    text: str          # what replaces it (C++: the variant inside the schema; Python: the file's new text there)
    what: str          # the original text, for the table


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


# ---- C++ -------------------------------------------------------------------------------------


def cpp_code_mask(text):
    """`text` with the inside of comments, string and character literals blanked (same length,
    line breaks kept), so that the patterns below see only code."""
    out, i, n = list(text), 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
        elif text[i] in "\"'":
            j = i + 1
            while j < n and text[j] != text[i]:
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, j)
            j += 1
        else:
            j = i + 1
        i = j
    return "".join(out)


def matching_paren(code, open_at):
    """The index of the ')' that closes the '(' at `open_at` in masked code."""
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] in "([{":
            depth += 1
        elif code[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced parenthesis at {open_at}")


def operand_start(code, op_at):
    """Where the left operand of the binary operator at `op_at` begins: scanning back over
    balanced brackets to the nearest operator of lower precedence (&&, ||, ?, :, =, ',', ';',
    a bitwise &, | or ^, an open bracket, `return`)."""
    i, depth = op_at - 1, 0
    while i >= 0:
        c = code[i]
        if c in ")]":
            depth += 1
        elif c in "([{":
            if depth == 0:
                return i + 1
            depth -= 1
        elif depth == 0:
            if c in ",;?}" or (c == ":" and code[i - 1] != ":" and code[i + 1] != ":"):
                return i + 1
            if c in "&|^" and code[i + 1] == " " and code[i - 1] in " &|":
                return i + 1
            if c == "=" and code[i - 1] not in "=!<>" and code[i + 1] != "=":
                return i + 1
            if code[max(0, i - 5):i + 1] == "return" and not (code[i - 6:i - 5].isalnum() or code[i - 6:i - 5] == "_"):
                return i + 1
        i -= 1
    return 0


def operand_end(code, op_end):
    """Where the right operand of the binary operator ending at `op_end` ends (exclusive)."""
    i, depth = op_end, 0
    while i < len(code):
        c = code[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
        elif depth == 0:
            if c in ",;?" or (c == ":" and code[i + 1] != ":" and code[i - 1] != ":"):
                return i
            if c in "&|^" and code[i - 1] == " " and code[i + 1] in " &|":
                return i
            if c in "=!" and code[i + 1] == "=":
                return i
        i += 1
    return i


def trimmed(text, start, end):
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def guarded_refusal_conditions(code):
    """The spans (start, end) of the conditions of `if (...)` whose first statement is a throw
    of a refusal."""
    spans = []
    for m in re.finditer(r"\bif \(", code):
        open_at = m.end() - 1
        close = matching_paren(code, open_at)
        after = code[close + 1:close + 200].lstrip().lstrip("{").lstrip()
        if re.match(r"throw (%s)\(" % "|".join(CPP_REFUSALS), after):
            spans.append((open_at + 1, close))
    return spans


def comparison_mutants(path, text, code, spans):
    """The comparison sites inside `spans` (or everywhere when spans is None): each comparison
    (an operator <, <=, > or >= with spaces around it) at its edge, and an integer literal operand
    one more and one less. One Mutant per variant; `text` is the whole comparison's replacement."""
    out = []
    for m in re.finditer(r"(?<=[ ])(<=|>=|<|>)(?= )", code):
        if spans is not None and not any(a <= m.start() < b for a, b in spans):
            continue
        op, op_at = m.group(1), m.start()
        left = trimmed(text, operand_start(code, op_at), op_at)
        right = trimmed(text, m.end(), operand_end(code, m.end()))
        lhs, rhs = text[left[0]:left[1]], text[right[0]:right[1]]
        if not lhs or not rhs:
            continue
        line = line_of(text, op_at)
        variants = [(f"{op}→{EDGE[op]}", f"{lhs} {EDGE[op]} {rhs}")]
        for side, operand in (("rhs", rhs), ("lhs", lhs)):
            if re.fullmatch(r"\d+", operand):
                n = int(operand)
                for shifted in (n + 1, n - 1):
                    variants.append((f"{n}→{shifted}",
                                     f"{lhs} {op} {shifted}" if side == "rhs" else f"{shifted} {op} {rhs}"))
        for kind, variant in variants:
            out.append(Mutant(f"{path}:{line}:{kind}", path, left[0], right[1], variant, f"{lhs} {op} {rhs}"))
    return out


def in_constant_expression(code, at):
    """True when `at` lies on a line that the compiler evaluates as a constant (constexpr,
    static_assert, a template argument list or a case label): no switch can be compiled in there."""
    line = code[code.rfind("\n", 0, at) + 1:code.find("\n", at)]
    return re.search(r"\b(constexpr|static_assert|template|case)\b", line) is not None


def cpp_mutants(path, text):
    """Every Mutant of the C++ file `path` whose content is `text`."""
    code = cpp_code_mask(text)
    return without_overlaps([m for m in cpp_sites(path, text, code) if not in_constant_expression(code, m.start)])


def cpp_sites(path, text, code):
    """The mutants of cpp_mutants before the constant expressions and crossing spans are left out."""
    out = []
    for m in re.finditer(r"\bthrow (%s)\(" % "|".join(CPP_REFUSALS), code):
        before = code[:m.start()].rstrip()
        if before.endswith(("?", ":", "(", ",", "=")) and not before.endswith("::"):
            continue  # an expression (a conditional's branch): no statement to remove
        close = matching_paren(code, m.end() - 1)
        end = close + 1
        if code[end:end + 1] != ";":
            continue
        out.append(Mutant(f"{path}:{line_of(text, m.start())}:throw", path, m.start(), end + 1, "", text[m.start():end]))
    for m in re.finditer(r"(\breturn |\? 0 : )([234]);", code):
        at = m.start(2)
        out.append(Mutant(f"{path}:{line_of(text, at)}:exit{m.group(2)}", path, at, at + 1, "1", m.group(0)))
    spans = None if path.endswith(EVERY_COMPARISON) else guarded_refusal_conditions(code)
    out += comparison_mutants(path, text, code, spans)
    if path.endswith(ARITHMETIC_LITERALS):
        for m in re.finditer(r"(?<=[-+*] )(\d+)\b|\b(\d+)(?= [-+*] )", code):
            n, at = int(m.group(0)), m.start()
            if code[at - 1:at].isalnum() or code[at - 1:at] == "_":
                continue
            for shifted in (n + 1, n - 1):
                out.append(Mutant(f"{path}:{line_of(text, at)}:{n}→{shifted}", path, at, m.end(), str(shifted), m.group(0)))
    return out


def without_overlaps(mutants):
    """The mutants whose spans nest or are disjoint with every other site's (sites that merely
    overlap could not be compiled in together: the later one is dropped)."""
    kept, spans = [], []
    for mutant in sorted(mutants, key=lambda x: (x.start, -x.end)):
        span = (mutant.start, mutant.end)
        crossing = any(a < span[0] < b < span[1] or span[0] < a < span[1] < b for a, b in spans)
        if not crossing:
            kept.append(mutant)
            if span not in spans:
                spans.append(span)
    return sorted(kept, key=lambda x: (x.start, x.name))


# The switch every instrumented C++ file includes: mutant K is on when GPT2_MUTANT=K. With
# GPT2_MUTANT_TRACE=FILE nothing is switched on, and the number of every mutant that could change
# what the program does is appended to FILE (once per process): a throw or exit status reached, a
# comparison or literal whose variant gives another value than the original here (the test
# "infects" it; one that never does cannot be killed by that test).
MUTANT_SWITCH = """#ifndef GPT2_MUTANT_SWITCH
#define GPT2_MUTANT_SWITCH
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>
inline const char* mutant_trace() {
    static const char* path = std::getenv("GPT2_MUTANT_TRACE");
    return path;
}
inline void mutant_record(int k) {
    static std::vector<char> seen(1 << 16);
    if (k < 0 || k >= (int)seen.size() || seen[k]) return;
    seen[k] = 1;
    if (FILE* f = std::fopen(mutant_trace(), "a")) {
        std::fprintf(f, "%d\\n", k);
        std::fclose(f);
    }
}
inline bool mutant_on(int k) {
    static const int active = [] { const char* v = std::getenv("GPT2_MUTANT"); return v ? std::atoi(v) : -1; }();
    if (mutant_trace()) mutant_record(k);
    return active == k;
}
template <typename T>
std::pair<int, T> mutant_variant(int k, T value) { return {k, value}; }
template <typename T, typename... Variants>
T mutant_infections(T original, Variants... variants) {
    for (const auto& v : {variants...})
        if (v.second != original) mutant_record(v.first);
    return original;
}
#endif
"""


def instrument_cpp(text, mutants, ids):
    """`text` with every mutant of `mutants` compiled in, mutant i switched on by mutant_on(ids[i]):
    a throw statement T becomes `{ if (!mutant_on(K)) T }`, any other site S with variants V1, V2
    ... becomes `(mutant_on(K1) ? (V1) : mutant_on(K2) ? (V2) : (S))` (a literal: without the
    parentheses around S). Sites that nest are instrumented inside out."""
    by_span = {}
    for mutant, k in zip(mutants, ids):
        by_span.setdefault((mutant.start, mutant.end), []).append((mutant, k))
    spans = sorted(by_span, key=lambda s: (s[1] - s[0]))  # inner (shorter) first
    pieces = {}  # span -> instrumented text of that span

    def render(span):
        start, end = span
        inner = [s for s in spans if s != span and start <= s[0] and s[1] <= end]
        inner = [s for s in inner if not any(o != s and o in inner and o[0] <= s[0] and s[1] <= o[1] for o in inner)]
        body, at = "", start
        for s in sorted(inner):
            body += text[at:s[0]] + pieces[s]
            at = s[1]
        return body + text[at:end]

    for span in spans:
        original = render(span)
        group = by_span[span]
        if group[0][0].name.endswith(":throw"):
            (_, k), = group
            pieces[span] = "{ if (!mutant_on(%d)) %s }" % (k, original)
            continue
        expression = f"({original})"
        for mutant, k in reversed(group):
            expression = f"mutant_on({k}) ? ({mutant.text}) : {expression}"
        variants = ", ".join(f"mutant_variant({k}, ({mutant.text}))" for mutant, k in group)
        pieces[span] = f"(mutant_trace() ? mutant_infections(({original}), {variants}) : {expression})"
    top = [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
    body, at = "", 0
    for s in sorted(top):
        body += text[at:s[0]] + pieces[s]
        at = s[1]
    body += text[at:]
    first_line_end = body.index("\n", body.index("#pragma once")) + 1 if "#pragma once" in body else 0
    return body[:first_line_end] + MUTANT_SWITCH + body[first_line_end:]


# ---- Python ----------------------------------------------------------------------------------


def logical_lines(text):
    """The logical lines of Python source `text`, each a list of tokens (comments, newlines and
    indentation left out)."""
    lines, current = [], []
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in skip:
            continue
        if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if current:
                lines.append(current)
            current = []
        else:
            current.append(tok)
    return lines


def py_mutants(path, text):
    """Every Mutant of the Python file `path`: the whole file's text after the change is built by
    mutate.py from (start, end, text)."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    offset = lambda pos: starts[pos[0] - 1] + pos[1]
    lines = logical_lines(text)
    out = []
    for i, toks in enumerate(lines):
        words = [t.string for t in toks]
        # A refusal raised: the statement replaced by `pass` (its line breaks kept).
        if words[0] == "raise" and len(words) > 1 and words[1] in PY_REFUSALS:
            start, end = offset(toks[0].start), offset(toks[-1].end)
            out.append(Mutant(f"{path}:{toks[0].start[0]}:throw", path, start, end,
                              "pass" + "\n" * text.count("\n", start, end), text[start:end].split("\n")[0]))
        # An exit status 2, 3 or 4: return N, sys.exit(N), self.exit(N, ...).
        for j, t in enumerate(toks):
            if t.type == tokenize.NUMBER and t.string in ("2", "3", "4") and j > 0 and (
                    (words[j - 1] == "return" and j == len(toks) - 1) or
                    (words[j - 1] == "(" and j > 1 and words[j - 2] == "exit")):
                at = offset(t.start)
                out.append(Mutant(f"{path}:{t.start[0]}:exit{t.string}", path, at, at + 1, "1",
                                  " ".join(words[max(0, j - 2):j + 1])))
        # The comparisons of an if / elif whose body is a raise of a refusal.
        if words[0] in ("if", "elif") and guards_a_refusal(toks, lines, i):
            colon = max(j for j, w in enumerate(words) if w == ":")
            for j, t in enumerate(toks[:colon]):
                if t.type == tokenize.OP and t.string in EDGE:
                    at = offset(t.start)
                    out.append(Mutant(f"{path}:{t.start[0]}:{t.string}→{EDGE[t.string]}", path, at, at + len(t.string),
                                      EDGE[t.string], " ".join(words[max(0, j - 1):j + 2])))
                    for neighbour in (j - 1, j + 1):
                        n = toks[neighbour]
                        if n.type == tokenize.NUMBER and re.fullmatch(r"\d+", n.string):
                            for shifted in (int(n.string) + 1, int(n.string) - 1):
                                at = offset(n.start)
                                out.append(Mutant(f"{path}:{n.start[0]}:{n.string}→{shifted}", path, at,
                                                  at + len(n.string), str(shifted), " ".join(words[max(0, j - 1):j + 2])))
    return out


def guards_a_refusal(toks, lines, i):
    """True when the if/elif logical line `toks` (number i) raises a refusal: on its own line
    (`if x: raise E(...)`) or as the first statement of its block."""
    words = [t.string for t in toks]
    colon = max(j for j, w in enumerate(words) if w == ":")
    body = words[colon + 1:] if colon + 1 < len(words) else ([t.string for t in lines[i + 1]] if i + 1 < len(lines) else [])
    return len(body) > 1 and body[0] == "raise" and body[1] in PY_REFUSALS


def mutants_of(path, text):
    """The mutants of one source file, C++ or Python by its name, each with a name of its own."""
    mutants = py_mutants(path, text) if path.endswith(".py") else cpp_mutants(path, text)
    seen = {}
    for mutant in mutants:
        seen[mutant.name] = seen.get(mutant.name, 0) + 1
        if seen[mutant.name] > 1:
            mutant.name += f"#{seen[mutant.name]}"
    for mutant in mutants:
        mutant.what = " ".join(mutant.what.split())
    return mutants
