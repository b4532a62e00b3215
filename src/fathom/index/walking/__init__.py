"""The parts of a project walk (`fathom.index.walker`): the skip reasons and their words
(`reasons`), the roots a walk may start from (`roots`), what a file's name says (`names`), the
selection rules of ignore files and globs (`selection`), the bounded read of one file (`read`)
and the folder descriptors every folder and file is opened through (`tree`). `walker` puts
them together; import from there.
"""
