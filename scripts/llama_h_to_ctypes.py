"""Generate headprune's ctypes declarations of llama.cpp from its own headers: never typed by hand.

For each supported xllamacpp release, ``scripts/llama_cpp_headers/VERSION/`` keeps, as they are in that release's
source distribution on PyPI, ``llama.h``, the ggml headers the declarations need (``ggml.h``, ``ggml-backend.h``),
``llama_default_params.cpp`` (llama.cpp's two ``*_default_params`` functions, cut verbatim from
``src/llama-context.cpp`` and ``src/llama-model.cpp``) and ``SOURCE`` (which file, its sha256). From them this
script writes ``headprune/exporter/llama_cpp_decls/bBUILD.py``: every struct the wanted functions pass by value
(all fields, in the header's order), the functions' signatures, the enum constants they use, the callback types
and the defaults llama.cpp's own ``*_default_params`` return, matched to the fields by position as C++ matches an
aggregate initializer. ``__init__.py`` there maps each xllamacpp release to its module.

    python scripts/llama_h_to_ctypes.py import xllamacpp-VERSION.tar.gz   # keep one release's headers, regenerate
    python scripts/llama_h_to_ctypes.py                                     # regenerate from the kept headers
    python scripts/llama_h_to_ctypes.py --check                             # exit 1 if a generated file differs

The C parser reads the declarations llama.h and ggml write (structs, enums, typedefs, ``LLAMA_API`` functions);
anything it cannot read fails the generation, naming it, rather than guessing a layout.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ROOT / "scripts" / "llama_cpp_headers"
OUT = ROOT / "headprune" / "exporter" / "llama_cpp_decls"
KEPT = ("include/llama.h", "ggml/include/ggml.h", "ggml/include/ggml-backend.h")
DEFAULT_SOURCES = {"llama_context_params": "src/llama-context.cpp", "llama_model_params": "src/llama-model.cpp"}
# What headprune calls; everything about them (layouts, types, values) comes from the headers.
FUNCTIONS = ("llama_backend_init", "llama_log_set", "llama_model_default_params", "llama_context_default_params",
             "llama_model_load_from_file", "llama_model_free", "llama_init_from_model", "llama_free",
             "llama_model_get_vocab", "llama_vocab_n_tokens", "llama_n_ctx", "llama_n_batch", "llama_n_ubatch",
             "llama_n_threads", "llama_n_threads_batch", "llama_batch_init", "llama_batch_free", "llama_decode",
             "llama_get_logits_ith", "llama_get_memory", "llama_memory_clear", "llama_tokenize")
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


class Generator:
    """Turns one build's :class:`Header` into the text of its declarations module."""

    def __init__(self, header: Header) -> None:
        self.h = header
        self.structs: list[str] = []  # in dependency order
        self.callbacks: list[str] = []
        self.enums: list[str] = []
        self.constants = self._constants()

    def _constants(self) -> dict[str, object]:
        known: dict[str, object] = {}
        for name, value in self.h.macros.items():
            try:
                known[name] = evaluate(value, known)
            except HeaderError:
                pass
        for members in self.h.enums.values():
            following = 0
            for name, expression in members:
                value = evaluate(expression, known) if expression else following
                known[name] = value
                following = int(value) + 1  # type: ignore[call-overload]
        return known

    def ctype(self, t: tuple, argument: bool = False) -> str:
        kind, what, pointers = t
        if kind == "array":
            return f"{self.ctype(what[0])} * {what[1]}"
        if kind == "name" and what in self.h.funcptrs:
            if pointers == 0 and argument:
                self._callback(what)
                return what
            return "ctypes.c_void_p" if pointers == 0 else "ctypes.POINTER(ctypes.c_void_p)"
        if kind == "name" and what in self.h.typedefs:
            inner = self.h.typedefs[what]
            return self.ctype((inner[0], inner[1], inner[2] + pointers), argument)
        if kind == "name":
            kind = "base" if what in BASE else "struct" if what in self.h.structs else "enum" if what in self.h.enums \
                else kind
        if kind == "funcptr":
            return "ctypes.c_void_p"
        if kind == "enum":
            self._enum(what)
            return "ctypes.c_int" if not pointers else _pointer("ctypes.c_int", pointers)
        if kind == "struct":
            if what in self.h.structs and (pointers == 0 or what in self.structs):
                self._struct(what)
                return _pointer(what, pointers)
            if pointers:
                return _pointer("ctypes.c_void_p", pointers - 1)
            raise HeaderError(f"struct {what} is passed by value but never defined")
        if kind == "base":
            if what == "void":
                return "None" if not pointers else _pointer("ctypes.c_void_p", pointers - 1)
            if what == "char" and pointers:
                return _pointer("ctypes.c_char_p", pointers - 1)
            return _pointer(f"ctypes.{BASE[what]}", pointers)
        raise HeaderError(f"type {what!r} is not declared in the kept headers")

    def _struct(self, tag: str) -> None:
        if tag in self.structs:
            return
        for _, field, _ in self.h.structs[tag]:
            self.ctype(field)
        self.structs.append(tag)

    def _enum(self, tag: str) -> None:
        if tag not in self.enums:
            self.enums.append(tag)

    def _callback(self, name: str) -> None:
        if name not in self.callbacks:
            result, params = self.h.funcptrs[name]
            for t in (result, *params):
                self.ctype(t)
            self.callbacks.append(name)

    def module(self, version: str, build: str, defaults_text: str, source: str) -> str:
        functions = []
        for name in FUNCTIONS:
            if name not in self.h.functions:
                raise HeaderError(f"llama.h of xllamacpp {version} declares no {name}")
            result, params, text = self.h.functions[name]
            args = ", ".join(self.ctype(p, argument=True) for p in params)
            functions.append(f'    "{name}": ({self.ctype(result)}, [{args}]),  # {text}')
        defaults = parse_defaults(defaults_text, self.constants)
        lines = [f'"""ctypes declarations of llama.cpp {build} (xllamacpp {version}): GENERATED by',
                 "scripts/llama_h_to_ctypes.py from scripts/llama_cpp_headers/" + version + " - do not edit.",
                 "", source.strip(), '"""', "", "# fmt: off", "# flake8: noqa", "import ctypes", "",
                 f'BUILD = "{build}"', f'XLLAMACPP = "{version}"', ""]
        for name in self.callbacks:
            result, params = self.h.funcptrs[name]
            lines.append(f"{name} = ctypes.CFUNCTYPE({', '.join(self.ctype(t) for t in (result, *params))})")
        for tag in self.structs:
            lines += ["", "", f"class {tag}(ctypes.Structure):", "    _fields_ = ["]
            lines += [f'        ("{n}", {self.ctype(f)}),  # {text}' for n, f, text in self.h.structs[tag]]
            lines.append("    ]")
        lines += ["", "", "FUNCTIONS = {  # name: (result, arguments)", *functions, "}"]
        lines += ["", "CONSTANTS = {  # the enums these declarations use"]
        for tag in self.enums:
            members = ", ".join(f'"{n}": {self.constants[n]!r}' for n, _ in self.h.enums[tag])
            lines.append(f"    # enum {tag}")
            lines += [f"    {chunk}" for chunk in _wrap(members)]
        lines += ["}", "", "DEFAULTS = {  # what llama.cpp's *_default_params return, field by field"]
        for struct, values in defaults.items():
            names = [n for n, _, _ in self.h.structs[struct]]
            if len(values) > len(names):
                raise HeaderError(f"{struct}: {len(values)} defaults for {len(names)} fields")
            zero = [None if self.ctype(f).startswith(("ctypes.c_void_p", "ctypes.POINTER", "ctypes.c_char_p"))
                    else False if self.ctype(f) == "ctypes.c_bool" else 0 for _, f, _ in self.h.structs[struct]]
            values = values + zero[len(values):]  # C++ value-initialises the fields an initializer leaves out
            lines.append(f'    "{struct}": {{')
            lines += [f"        {chunk}" for chunk in _wrap(", ".join(f'"{n}": {v!r}' for n, v in zip(names, values)))]
            lines.append("    },")
        return "\n".join(lines + ["}", ""])


def _pointer(inner: str, count: int) -> str:
    for _ in range(count):
        inner = f"ctypes.POINTER({inner})"
    return inner


def _wrap(text: str, width: int = 108) -> list[str]:
    out, line = [], ""
    for item in text.split(", "):
        if line and len(line) + len(item) + 2 > width:
            out.append(line + ",")
            line = item
        else:
            line = f"{line}, {item}" if line else item
    return out + [line + ","] if line else out


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


def parse_defaults(text: str, constants: dict[str, object]) -> dict[str, list]:
    """The values each ``*_default_params`` function's aggregate initializer lists, in order."""
    out = {}
    toks, _ = tokens(text)
    for struct in DEFAULT_SOURCES:
        start = next(i for i in range(len(toks)) if toks[i:i + 3] == [struct, "result", "="])
        end = closing(toks, start + 3)
        out[struct] = [evaluate(" ".join(v), constants) for v in split(toks[start + 4:end]) if v]
    return out


def build_of(version: str) -> str:
    """xllamacpp's release number ends in the llama.cpp build it carries (2026.10.11549: b11549)."""
    return "b" + version.split(".")[2]


def generated() -> dict[Path, str]:
    """Every declarations module, and the index, from the kept headers."""
    files, index = {}, []
    for folder in sorted(p for p in HEADERS.iterdir() if p.is_dir()):
        version = folder.name
        texts = [(folder / Path(k).name).read_text(encoding="utf-8") for k in reversed(KEPT)]
        source = (folder / "SOURCE").read_text(encoding="utf-8")
        text = Generator(Header(texts)).module(version, build_of(version),
                                               (folder / "llama_default_params.cpp").read_text(encoding="utf-8"),
                                               source)
        files[OUT / f"{build_of(version)}.py"] = text
        index.append(f'    "{version}": "{build_of(version)}",')
    files[OUT / "__init__.py"] = "\n".join([
        '"""Which declarations module serves each supported xllamacpp release: GENERATED by',
        'scripts/llama_h_to_ctypes.py from the folders in scripts/llama_cpp_headers - do not edit."""', "",
        "SUPPORTED = {  # xllamacpp release: module (its llama.cpp build)", *index, "}", ""])
    return files


def import_sdist(path: Path) -> str:
    """Keep one release's headers and default-parameter functions beside this script; its version."""
    version = re.match(r"xllamacpp-(\d+\.\d+\.\d+(?:\.\d+)?)\.tar\.gz$", path.name)
    if version is None:
        raise HeaderError(f"{path.name} is not an xllamacpp source distribution (xllamacpp-VERSION.tar.gz)")
    folder = HEADERS / version.group(1)
    folder.mkdir(parents=True, exist_ok=True)
    root = f"{path.name[:-len('.tar.gz')]}/thirdparty/llama.cpp/"
    with tarfile.open(path) as archive:
        def read(member: str) -> str:
            return archive.extractfile(root + member).read().decode("utf-8")  # type: ignore[union-attr]

        for member in KEPT:
            (folder / Path(member).name).write_text(read(member), encoding="utf-8")
        cut = []
        for struct, member in DEFAULT_SOURCES.items():
            found = re.search(rf"^(?:struct )?{struct} {struct[:-7]}_default_params\(\) \{{\n.*?^\}}\n",
                              read(member), flags=re.DOTALL | re.MULTILINE)
            if found is None:
                raise HeaderError(f"{member} of {path.name} has no {struct[:-7]}_default_params()")
            cut.append(f"// {member}, verbatim\n{found.group(0)}")
    (folder / "llama_default_params.cpp").write_text("\n".join(cut), encoding="utf-8")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (folder / "SOURCE").write_text(f"From {path.name} on PyPI (sha256 {digest}): thirdparty/llama.cpp/"
                                   f"{{{', '.join(KEPT + tuple(DEFAULT_SOURCES.values()))}}}.\n", encoding="utf-8")
    return version.group(1)


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["import"]:
            for path in argv[1:]:
                print("kept the headers of xllamacpp", import_sdist(Path(path)))
        files = generated()
    except HeaderError as error:
        print(f"llama_h_to_ctypes: {error}", file=sys.stderr)
        return 2
    if argv[:1] == ["--check"]:
        stale = [str(p.relative_to(ROOT)) for p, text in files.items()
                 if not p.exists() or p.read_text(encoding="utf-8") != text]
        stale += [str(p.relative_to(ROOT)) for p in OUT.glob("*.py") if p not in files]
        for path in stale:
            print(f"{path} is not what scripts/llama_h_to_ctypes.py generates: run it", file=sys.stderr)
        return 1 if stale else 0
    OUT.mkdir(exist_ok=True)
    for stale in set(OUT.glob("b*.py")) - set(files):
        stale.unlink()  # a module of a release no longer kept (only this script writes here)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    print(f"wrote {', '.join(p.name for p in files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
