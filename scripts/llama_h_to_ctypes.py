"""Generate headprune's ctypes declarations of llama.cpp from its own headers: never typed by hand.

For each supported xllamacpp release, ``third_party/llama.cpp/VERSION/`` keeps (llama.cpp's files, under its MIT
licence: LICENSE and README.md there), as they are in that release's source distribution on PyPI, ``llama.h``,
the ggml headers the declarations need (``ggml.h``, ``ggml-backend.h``),
``llama_default_params.cpp`` (llama.cpp's two ``*_default_params`` functions, cut verbatim from
``src/llama-context.cpp`` and ``src/llama-model.cpp``) and ``SOURCE`` (which file, its sha256). From them this
script writes ``headprune/exporter/llama_cpp/decls/bBUILD.py``: every struct the wanted functions pass by value
(all fields, in the header's order), the functions' signatures, the enum constants they use, the callback types
and the defaults llama.cpp's own ``*_default_params`` return, matched to the fields by position as C++ matches an
aggregate initializer. ``__init__.py`` there maps each xllamacpp release to its module.

    python scripts/llama_h_to_ctypes.py import xllamacpp-VERSION.tar.gz   # keep one release's headers, regenerate
    python scripts/llama_h_to_ctypes.py                                     # regenerate from the kept headers
    python scripts/llama_h_to_ctypes.py --check                             # exit 1 if a generated file differs

The C reader (``scripts/c_header.py``) reads the declarations llama.h and ggml write (structs, enums, typedefs,
``LLAMA_API`` functions); a wanted one it cannot read fails the generation, naming it, rather than guess a layout.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from c_header import BASE, Header, HeaderError, closing, evaluate, split, tokens  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ROOT / "third_party" / "llama.cpp"  # llama.cpp's files, apart from ours
OUT = ROOT / "headprune" / "exporter" / "llama_cpp" / "decls"
KEPT = ("include/llama.h", "ggml/include/ggml.h", "ggml/include/ggml-backend.h")
DEFAULT_SOURCES = {"llama_context_params": "src/llama-context.cpp", "llama_model_params": "src/llama-model.cpp"}
# What headprune calls; everything about them (layouts, types, values) comes from the headers.
FUNCTIONS = ("llama_backend_init", "llama_log_set", "llama_model_default_params", "llama_context_default_params",
             "llama_model_load_from_file", "llama_model_free", "llama_init_from_model", "llama_free",
             "llama_model_get_vocab", "llama_vocab_n_tokens", "llama_n_ctx", "llama_n_batch", "llama_n_ubatch",
             "llama_n_threads", "llama_n_threads_batch", "llama_batch_init", "llama_batch_free", "llama_decode",
             "llama_get_logits_ith", "llama_get_memory", "llama_memory_clear", "llama_tokenize",
             # several sequences in one context: a shared prompt prefix's cells given to each row (task checks)
             "llama_n_seq_max", "llama_memory_seq_rm", "llama_memory_seq_cp",
             # an encoder's per-token embeddings (GGUF of BERT-style models) and the pooling its context uses
             "llama_get_embeddings_ith", "llama_get_embeddings_seq", "llama_model_n_embd", "llama_pooling_type",
             # llama.cpp's per-row quantizers (what llama_model_quantize calls for every tensor; xllamacpp does not
             # export llama_model_quantize itself) and the block sizes its tensor-type choice reads
             "ggml_quantize_chunk", "ggml_validate_row_data", "ggml_row_size", "ggml_blck_size")
# Callbacks headprune sets in a struct's fields (declared there as pointers): a Ctrl-C stops a decode between two of
# its graph's nodes (abort) and a load between two tensors (progress).
FIELD_CALLBACKS = ("ggml_abort_callback", "llama_progress_callback")
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
        for name in FIELD_CALLBACKS:
            self._callback(name)
        defaults = parse_defaults(defaults_text, self.constants)
        lines = [f'"""ctypes declarations of llama.cpp {build} (xllamacpp {version}): GENERATED by',
                 "scripts/llama_h_to_ctypes.py from third_party/llama.cpp/" + version + " - do not edit.",
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
        'scripts/llama_h_to_ctypes.py from the folders in third_party/llama.cpp - do not edit."""', "",
        "SUPPORTED = {  # xllamacpp release: module (its llama.cpp build)", *index, "}", ""])
    return files


def import_sdist(path: Path) -> str:
    """Keep one release's headers and default-parameter functions in third_party/llama.cpp; its version."""
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
