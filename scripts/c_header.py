"""A reader of the C declarations llama.h and ggml write (structs, enums, typedefs, ``LLAMA_API`` functions,
numeric ``#define``s), for scripts/llama_h_to_ctypes.py: what it cannot read it leaves out, and the generator
fails where a declaration it needs is missing rather than guess a layout.
"""

from __future__ import annotations

import ast
import re

BASE = {"void": None, "bool": "c_bool", "char": "c_char", "int": "c_int", "unsigned": "c_uint", "float": "c_float",
        "double": "c_double", "size_t": "c_size_t", "long": "c_long", "int8_t": "c_int8", "uint8_t": "c_uint8",
        "int16_t": "c_int16", "uint16_t": "c_uint16", "int32_t": "c_int32", "uint32_t": "c_uint32",
        "int64_t": "c_int64", "uint64_t": "c_uint64"}
QUALIFIERS = {"const", "volatile", "restrict", "GGML_RESTRICT"}
TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|[A-Za-z_]\w*|0[xX][0-9a-fA-F]+[uUlL]*|\d+\.\d*(?:[eE][-+]?\d+)?[fF]?'
                   r"|\d+[uUlL]*|<<|>>|\.\.\.|\S")


class HeaderError(Exception):
    """A wanted declaration the parser cannot read."""


def tokens(text: str) -> tuple[list[str], dict[str, str]]:
    """The C tokens of ``text`` (comments and preprocessor lines dropped) and its ``#define NAME VALUE`` macros."""
    text = re.sub(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', lambda m: m.group(1) or " ", text, flags=re.DOTALL)
    text = re.sub(r"\\\n", " ", text)
    macros, kept = {}, []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            found = re.match(r"\s*#\s*define\s+(\w+)\s+(\S.*)$", line)
            if found:
                macros[found.group(1)] = found.group(2).strip()
        else:
            kept.append(line)
    return TOKEN.findall("\n".join(kept)), macros


def statements(toks: list[str]) -> list[list[str]]:
    """Top-level declarations: up to a ``;`` outside braces, or a function body's closing brace."""
    out, current, depth = [], [], 0
    i = 0
    while i < len(toks):
        t = toks[i]
        if depth == 0 and t == "extern" and toks[i + 1:i + 3] == ['"C"', "{"]:
            i += 3
            continue
        if depth == 0 and t == "}":  # the end of an extern "C" block
            i += 1
            continue
        current.append(t)
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            opened = current.index("{")
            if depth == 0 and "(" in current[:opened] and current[0] != "typedef":
                out.append(current)  # a function body
                current = []
        elif t == ";" and depth == 0:
            out.append(current[:-1])
            current = []
        i += 1
    return out


def split(toks: list[str], sep: str = ",") -> list[list[str]]:
    parts, current, depth = [], [], 0
    for t in toks:
        depth += t in "([{"
        depth -= t in ")]}"
        if t == sep and depth == 0:
            parts.append(current)
            current = []
        else:
            current.append(t)
    return parts + [current] if current else parts


def closing(toks: list[str], start: int) -> int:
    """The index of the bracket closing the one at ``start``."""
    depth = 0
    for i in range(start, len(toks)):
        depth += toks[i] in "([{"
        depth -= toks[i] in ")]}"
        if depth == 0:
            return i
    raise HeaderError(f"unbalanced brackets in {' '.join(toks)}")


def declarator(toks: list[str]) -> tuple[str, tuple]:
    """``(name, type)`` of one field or parameter; a type is ``("base"|"struct"|"enum"|"name"|"funcptr", what,
    pointers)``."""
    toks = [t for t in toks if t not in QUALIFIERS]
    if "(" in toks and toks[toks.index("(") + 1] == "*":  # a function pointer: RET (*name)(ARGS)
        start = toks.index("(")
        return toks[start + 2], ("funcptr", " ".join(toks), 0)
    array = 0
    if toks and toks[-1] == "]":
        array = int(toks[toks.index("[") + 1])
        toks = toks[:toks.index("[")]
    name = toks[-1] if len(toks) > 1 and re.fullmatch(r"[A-Za-z_]\w*", toks[-1]) else ""
    body = toks[:-1] if name else toks
    pointers = body.count("*")
    words = [t for t in body if t != "*"]
    if words[0] in ("struct", "enum"):
        kind, what = words[0], words[1]
    elif all(w in BASE or w in ("signed", "short") for w in words):
        kind, what = "base", {"unsigned": "unsigned", "unsigned int": "unsigned"}.get(" ".join(words), words[-1])
    else:
        kind, what = "name", words[-1]
    return name, (kind, what, pointers) if not array else ("array", ((kind, what, pointers), array), 0)


class Header:
    """The declarations of a set of headers, by name."""

    def __init__(self, texts: list[str]) -> None:
        self.structs: dict[str, list[tuple[str, tuple, str]]] = {}
        self.enums: dict[str, list[tuple[str, str]]] = {}
        self.typedefs: dict[str, tuple] = {}
        self.funcptrs: dict[str, tuple[tuple, list[tuple]]] = {}
        self.functions: dict[str, tuple[tuple, list[tuple], str]] = {}
        self.macros: dict[str, str] = {}
        self.unreadable: list[str] = []  # declarations the parser does not know (an error only where wanted)
        for text in texts:
            toks, macros = tokens(text)
            self.macros.update(macros)
            for statement in statements(toks):
                try:
                    self._read(statement)
                except (IndexError, ValueError, HeaderError):
                    self.unreadable.append(" ".join(statement[:12]))

    def _read(self, s: list[str]) -> None:
        if s and s[0] == "DEPRECATED" and s[1] == "(":
            s = split(s[2:closing(s, 1)])[0]
        s = [t for t in s if not t.endswith("_API") and t not in ("static", "inline")]
        if not s:
            return
        if s[0] == "typedef":
            self._typedef(s[1:])
        elif s[0] in ("struct", "enum") and len(s) > 2 and s[2] == "{":
            self._body(s[0], s[1], s[2:closing(s, 2) + 1])
        elif "(" in s and "{" not in s:
            start = s.index("(")
            name = s[start - 1]
            if re.fullmatch(r"[a-z_]\w*", name) and start > 1:
                params = s[start + 1:closing(s, start)]
                result = declarator(s[:start - 1] + ["_"])[1]
                self.functions[name] = (result, self._params(params), " ".join(s[:closing(s, start) + 1]))

    def _params(self, toks: list[str]) -> list[tuple]:
        if toks in ([], ["void"]):
            return []
        return [declarator(p)[1] if "(" in p or len(p) > 1 else declarator(p + ["_"])[1] for p in split(toks)]

    def _typedef(self, s: list[str]) -> None:
        if s[0] in ("struct", "enum") and "{" in s[:3]:
            brace = s.index("{")
            end = closing(s, brace)
            tag = s[1] if brace == 2 else s[-1]
            self._body(s[0], tag, s[brace:end + 1])
            if s[end + 1:] and s[end + 1] != tag:
                self.typedefs[s[end + 1]] = (s[0], tag, 0)
        elif "(" in s and s[s.index("(") + 1] == "*":
            start = s.index("(")
            name = s[start + 2]
            params = s[closing(s, start) + 2:closing(s, closing(s, start) + 1)]
            self.funcptrs[name] = (declarator(s[:start] + ["_"])[1], self._params(params))
        else:
            name, kind = declarator(s)
            self.typedefs[name] = kind

    def _body(self, kind: str, tag: str, body: list[str]) -> None:
        inner = body[1:-1]
        if kind == "enum":
            self.enums[tag] = [(p[0], " ".join(p[2:])) for p in split(inner) if p]
        else:
            fields = []
            for part in split(inner, ";"):
                if part:
                    name, field = declarator(part)
                    fields.append((name, field, " ".join(part)))
            self.structs[tag] = fields


def evaluate(expression: str, known: dict[str, object]) -> object:
    """A C constant expression (integers, floats with ``f``, ``<<``, ``|``, names already known, ``nullptr``)."""
    text = expression.strip()
    if text in ("nullptr", "NULL"):
        return None
    if text in ("true", "false"):
        return text == "true"
    text = re.sub(r"\b(\d+\.\d*(?:[eE][-+]?\d+)?)[fF]\b", r"\1", text)
    text = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise HeaderError(f"cannot evaluate {expression!r}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in known:
            raise HeaderError(f"{expression!r} names {node.id}, not known")
        if not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load,
                                 ast.operator, ast.unaryop)):
            raise HeaderError(f"cannot evaluate {expression!r}")
    return eval(compile(tree, "<c>", "eval"), {"__builtins__": {}}, dict(known))  # noqa: S307 - checked above
