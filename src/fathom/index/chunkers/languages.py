"""Language detection from a path, and the one definition of a line end.

It owns which table (code or docs) a path's chunks belong to, and refuses to look inside the
file: the path decides.
"""

from __future__ import annotations

from pathlib import PurePosixPath

CODE = "code"
DOCS = "docs"


_EXTENSIONS: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".pyw": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".c++": "cpp",
    ".hh": "cpp",
    ".hpp": "cpp",
    ".hxx": "cpp",
    ".h++": "cpp",
    ".ipp": "cpp",
    ".tpp": "cpp",
    # Docs.
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdx": "markdown",
    ".rst": "rst",
    ".rest": "rst",
    ".txt": "text",
    ".text": "text",
    # Shell (the bash grammar), config and data (`structured`), and code without a grammar
    # here (line windows), all in the code table. fish is no bash: it keeps its own name.
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".fish": "fish",
    ".ps1": "powershell",
    ".bat": "batch",
    ".cmd": "batch",
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".jsonc": "json",
    ".ini": "ini",
    ".cfg": "ini",
    ".conf": "ini",
    ".properties": "properties",
    ".env": "dotenv",
    ".xml": "xml",
    ".html": "html",
    ".htm": "html",
    ".css": "css",
    ".scss": "scss",
    ".sass": "sass",
    ".less": "less",
    ".vue": "vue",
    ".svelte": "svelte",
    ".rb": "ruby",
    ".rake": "ruby",
    ".gemspec": "ruby",
    ".php": "php",
    ".pl": "perl",
    ".pm": "perl",
    ".lua": "lua",
    ".r": "r",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".swift": "swift",
    ".cs": "csharp",
    ".fs": "fsharp",
    ".scala": "scala",
    ".clj": "clojure",
    ".ex": "elixir",
    ".exs": "elixir",
    ".erl": "erlang",
    ".hs": "haskell",
    ".ml": "ocaml",
    ".dart": "dart",
    ".zig": "zig",
    ".nim": "nim",
    ".m": "objc",
    ".mm": "objcpp",
    ".jl": "julia",
    ".sql": "sql",
    ".proto": "protobuf",
    ".graphql": "graphql",
    ".gql": "graphql",
    ".tf": "terraform",
    ".hcl": "hcl",
    ".cmake": "cmake",
    ".mk": "make",
    ".gradle": "gradle",
    ".pyx": "cython",
    ".pxd": "cython",
    ".ipynb": "json",
    ".tex": "latex",
    ".vim": "vim",
    ".el": "elisp",
    ".dockerfile": "dockerfile",
}
_FILENAMES: dict[str, str] = {
    "makefile": "make",
    "gnumakefile": "make",
    "dockerfile": "dockerfile",
    "containerfile": "dockerfile",
    "cmakelists.txt": "cmake",
    "jenkinsfile": "groovy",
    "rakefile": "ruby",
    "gemfile": "ruby",
    "justfile": "make",
    "vagrantfile": "ruby",
}
# Extension-less prose files that belong to the docs table.
_DOC_STEMS = frozenset(
    {
        "readme",
        "changelog",
        "changes",
        "history",
        "news",
        "authors",
        "contributors",
        "contributing",
        "install",
        "license",
        "licence",
        "copying",
        "notice",
        "todo",
        "faq",
        "security",
        "code_of_conduct",
        "governance",
        "maintainers",
        "thanks",
        "usage",
    }
)
DOC_LANGUAGES = frozenset({"markdown", "rst"})
# Every language name a chunk can carry (what the searches' language filter accepts).
LANGUAGES = frozenset(_EXTENSIONS.values()) | frozenset(_FILENAMES.values()) | {"text"}


def detect_language(path: str | PurePosixPath) -> tuple[str, str]:
    """(language, table) for a path: e.g. ("python", "code"), ("markdown", "docs").

    Unknown extensions are ("text", "code"): indexed as line windows. `.txt` files and
    extension-less prose (README, CHANGELOG, ...) are ("text", "docs").
    """
    name = PurePosixPath(str(path).replace("\\", "/")).name
    lower = name.lower()
    if lower in _FILENAMES:
        return _FILENAMES[lower], CODE
    suffix = PurePosixPath(lower).suffix
    stem = lower[: -len(suffix)] if suffix else lower
    if stem in ("dockerfile", "containerfile") and suffix not in _EXTENSIONS:
        return "dockerfile", CODE  # Dockerfile.prod, Containerfile.dev
    if suffix in _EXTENSIONS:
        language = _EXTENSIONS[suffix]
        if language in DOC_LANGUAGES or language == "text":
            return language, DOCS
        return language, CODE
    if stem in _DOC_STEMS or lower.split(".", 1)[0] in _DOC_STEMS:
        return "text", DOCS
    return "text", CODE


def source_lines(text: str) -> list[str]:
    """The file's lines as every chunk numbers them (line n is `source_lines(text)[n-1]`)."""
    text = _normalize(text)
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _normalize(text: str) -> str:
    # One definition of a line end for tree-sitter rows, windows and callers alike.
    return text.replace("\r\n", "\n").replace("\r", "\n")
