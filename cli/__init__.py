"""The `aotc` command line: thin Click commands over the library in `aotc`."""
