"""Retrieval: walking and chunking projects, the vector store, indexing jobs and search."""
