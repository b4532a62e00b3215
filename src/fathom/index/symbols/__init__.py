"""Symbols and references from the index: definitions and identifier occurrences read from
the tree-sitter parse of every indexed code file (`extract`), kept in a table beside the
chunks that follows the index (`table`)."""
