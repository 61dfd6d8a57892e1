"""Python helpers shared by vrdma's end-to-end tests, benchmarks and demo:
the sandbox test bed and parsers for the output of the programs it runs."""
