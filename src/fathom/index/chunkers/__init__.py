"""The parts of chunking (`fathom.index.chunking`): languages and line ends (`languages`),
size bounds (`limits`), token counting and fitting (`tokens`), the pieces a file is cut into
and their windows (`pieces`), what a language's table holds (`spec`), the per-language grammar
tables of code (`grammars`) and of config and data formats (`structured`), the tree-sitter
chunker of code (`code`) and the heading chunker of docs (`docs`). `chunking.chunk_file`
puts them together; import from `fathom.index.chunking`.
"""
